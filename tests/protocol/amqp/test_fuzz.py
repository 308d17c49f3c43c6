"""Garbage never breaks the protocol layer: whatever arrives, the connection either goes on or closes
with a reply code, and no exception other than its own escapes."""

from __future__ import annotations

import contextlib
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import body, commands, frame, header

from ferrymq.protocol.amqp import events as ev
from ferrymq.protocol.amqp.errors import AMQPError, ReplyCode
from ferrymq.protocol.amqp.fields import decode_properties, decode_table
from ferrymq.protocol.amqp.methods import decode_method
from tests.protocol.amqp.peer import Peer

CODES = set(ReplyCode)


def framed(parts: list[tuple[int, int, bytes]]) -> bytes:
    return b"".join(struct.pack(">BHI", t, c, len(p)) + p + b"\xce" for t, c, p in parts)


# frames that look right on the outside, with a known method id and random arguments inside
method_ids = st.sampled_from(sorted(commands.INDEX_MAPPING))
plausible = st.lists(
    st.tuples(
        st.sampled_from([1, 1, 1, 2, 3, 8]),
        st.integers(0, 3),
        st.tuples(method_ids, st.binary(max_size=60)).map(lambda m: m[0].to_bytes(4, "big") + m[1]),
    ),
    max_size=8,
).map(framed)
noise = st.binary(max_size=300)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(plausible | noise, max_size=4), st.booleans())
def test_garbage_after_the_handshake_ends_in_a_reply_code(chunks, with_channel):
    peer = Peer()
    peer.open(heartbeat=5)
    if with_channel:
        peer.method(1, commands.Channel.Open())
    for chunk in chunks:
        peer.send(chunk)
        peer.tick(peer.now + 1)
    for event in peer.events:
        if isinstance(event, ev.ConnectionClosed):
            assert event.code in CODES or event.code == 200


def conversation() -> bytes:
    """A client's whole side of a session: channels, publishes in confirm mode, acks, a close."""
    parts = [commands.Channel.Open(), commands.Confirm.Select(), commands.Basic.Publish(routing_key="k")]
    data = b"".join(frame.marshal(m, 1) for m in parts)
    data += frame.marshal(header.ContentHeader(0, 10000, commands.Basic.Properties(headers={"h": 1})), 1)
    data += frame.marshal(body.ContentBody(b"a" * 4088), 1) + frame.marshal(body.ContentBody(b"b" * 5912), 1)
    data += frame.marshal(commands.Basic.Ack(3, True), 1) + frame.marshal(
        commands.Queue.Declare(queue="q"), 1
    )
    return data + frame.marshal(commands.Channel.Close(200, "", 0, 0), 1)


def plain(event: ev.Event) -> object:
    """An event comparable by value (pamqp methods compare by identity)."""
    method = getattr(event, "method", None)
    if method is None or not hasattr(method, "__slots__") or not hasattr(method, "index"):
        return event
    return event.channel, method.name, [getattr(method, name) for name in method.__slots__]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 400), max_size=30))
def test_how_bytes_are_split_does_not_matter(cuts):
    data = conversation()
    whole = Peer()
    whole.open()
    expected = whole.send(data)
    split = Peer()
    split.open()
    answers, start = [], 0
    for cut in [*cuts, len(data)]:
        answers += split.send(data[start : start + cut])
        start += cut
    answers += split.send(data[start:])
    assert [(c, type(f)) for c, f in answers] == [(c, type(f)) for c, f in expected]
    assert [plain(e) for e in split.events] == [plain(e) for e in whole.events]
    assert [type(e).__name__ for e in whole.events] == [
        "ChannelOpened",
        "MethodReceived",  # confirm.select: the owner answers it, after the channel's earlier work
        "ContentReceived",
        "MethodReceived",
        "MethodReceived",
        "ChannelClosed",
    ]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=100), st.binary(max_size=200))
def test_garbage_during_the_handshake(prefix, rest):
    peer = Peer()
    peer.send(b"AMQP\x00\x00\x09\x01" + prefix)
    peer.send(rest)
    login = [e for e in peer.events if isinstance(e, ev.LoginRequested)]
    if login:
        peer.events += peer.server.refuse_login(login[0].mechanism, 0.0)
    assert all(e.code in CODES for e in peer.events if isinstance(e, ev.ConnectionClosed))


@settings(max_examples=500, deadline=None)
@given(method_ids, st.binary(max_size=80))
def test_method_decoder_raises_only_protocol_errors(index, args):
    try:
        decode_method(index.to_bytes(4, "big") + args)
    except AMQPError as e:
        assert e.code in (ReplyCode.FRAME_ERROR, ReplyCode.NOT_IMPLEMENTED)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=120))
def test_table_and_property_decoders_raise_only_value_error(data):
    for decoder in (decode_table, decode_properties):
        with contextlib.suppress(ValueError):
            decoder(data)


def test_deep_nesting_is_a_value_error():
    table = b""
    for _ in range(5000):
        entry = b"\x01kF" + len(table).to_bytes(4, "big") + table
        table = entry
    data = len(table).to_bytes(4, "big") + table
    with contextlib.suppress(ValueError):
        decode_table(data)


def test_a_publish_frame_is_used_as_is():
    peer = Peer()
    peer.open()
    peer.method(1, commands.Channel.Open())
    assert peer.send(frame.marshal(commands.Basic.Publish(), 1)) == []
