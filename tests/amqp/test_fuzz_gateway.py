"""Garbage into a running gateway, after a real handshake and channel.open: whatever arrives, the
connection goes on or is closed with a reply code, and the gateway keeps serving everyone else (it is
checked with a publish and a get after each case)."""

from __future__ import annotations

import contextlib
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands

from tests.amqp.raw_client import RawClient

method_ids = st.sampled_from(sorted(commands.INDEX_MAPPING))
frames = st.lists(
    st.tuples(
        st.sampled_from([1, 1, 1, 2, 3, 8]),
        st.sampled_from([0, 1, 1, 2]),
        st.tuples(method_ids, st.binary(max_size=80)).map(lambda m: m[0].to_bytes(4, "big") + m[1]),
    ),
    min_size=1,
    max_size=6,
).map(lambda parts: b"".join(struct.pack(">BHI", t, c, len(p)) + p + b"\xce" for t, c, p in parts))


def still_serves(port: int) -> None:
    client = RawClient("127.0.0.1", port)
    try:
        client.open()
        client.open_channel(1)
        client.declare(1, "fuzz-check")
        client.publish(1, "", "fuzz-check", b"alive")
        client.send(1, commands.Basic.Get(queue="fuzz-check", no_ack=True))
        client.expect(commands.Basic.GetOk)
    finally:
        client.close()


@settings(
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    deadline=None,
)
@given(garbage=frames)
def test_garbage_after_the_handshake_never_breaks_the_gateway(gateway, garbage):
    client = RawClient(gateway.host, gateway.port)
    try:
        client.open()
        client.open_channel(1)
        client.sock.settimeout(0.15)
        with contextlib.suppress(OSError):
            client.sock.sendall(garbage)
            while client.sock.recv(65536):  # whatever it answers, until it closes or goes quiet
                pass
    finally:
        client.close()
    still_serves(gateway.port)
