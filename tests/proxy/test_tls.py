"""The official 5.x Python client over TLS (``tls_enable=True``, trusting our test CA through
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH): through a broker's in-process proxy in permissive mode (a TLS port
plus a plaintext port, since gRPC cannot share one) and through a standalone proxy that enforces TLS."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from ferrymq.bench.processes import free_ports
from tests.compat.conftest import ServerProcess
from tests.pki import pki, server_args  # noqa: F401  (fixture)
from tests.proxy.conftest import Proxied, node_driver, python_driver, receive_until

pytestmark = pytest.mark.compat


@pytest.fixture
def secured(tmp_path, pki) -> Iterator[tuple[Proxied, str, str]]:  # noqa: F811
    """A NameServer, a permissive broker whose proxy serves TLS on one port and plaintext on another,
    and a standalone proxy enforcing TLS: (the broker's proxy, its plaintext address, the standalone's)."""
    log_dir = tmp_path / "servers"
    log_dir.mkdir()
    ports = free_ports(5)
    namesrv, broker, proxy, plaintext, standalone = (f"127.0.0.1:{p}" for p in ports)
    servers: list[ServerProcess] = []
    try:
        servers.append(ServerProcess("namesrv", ["--listen", namesrv], log_dir))
        servers[-1].wait_listening(namesrv)
        args = ["--namesrv", namesrv, "--listen", broker, "--store-dir", str(tmp_path / "store"),
                "--proxy-port", str(ports[2]), "--proxy-plaintext-port", str(ports[3]),
                *server_args(pki, "permissive")]  # fmt: skip
        servers.append(ServerProcess("broker", args, log_dir))
        for address in (broker, proxy, plaintext):
            servers[-1].wait_listening(address)
        args = ["--namesrv", namesrv, "--listen", standalone, *server_args(pki, "enforcing")]
        servers.append(ServerProcess("proxy", args, log_dir))
        servers[-1].wait_listening(standalone)
        yield Proxied("local", proxy, namesrv, broker, servers), plaintext, standalone
    finally:
        for server in reversed(servers):
            server.stop()


def round_trip(proxied: Proxied, driver, topic: str, group: str) -> None:
    proxied.create_topic(topic)
    driver.ok("producer", topics=[topic])
    sent = {driver.ok("send", topic=topic, body=f"secret-{i}")["id"] for i in range(3)}
    driver.ok("consumer", group=group, topic=topic, await_s=5)
    got = {m["id"] for m in receive_until(driver, lambda got: len({m["id"] for m in got}) >= 3)}
    assert got == sent


def test_tls_and_plaintext_clients_through_a_permissive_proxy(secured, client_python, pki, tmp_path):  # noqa: F811
    proxied, plaintext, _ = secured
    over_tls = python_driver(client_python, proxied.proxy, tmp_path / "tls-home", trust=pki.ca.cert)
    in_clear = python_driver(client_python, plaintext, tmp_path / "plain-home")
    try:
        round_trip(proxied, over_tls, "Secrets", "Readers")
        round_trip(proxied, in_clear, "Notes", "NoteReaders")
    finally:
        over_tls.close()
        in_clear.close()


def test_an_enforcing_proxy_serves_tls_and_refuses_the_rest(secured, client_python, pki, tmp_path):  # noqa: F811
    proxied, _, standalone = secured
    over_tls = python_driver(client_python, standalone, tmp_path / "tls-home", trust=pki.ca.cert)
    in_clear = python_driver(client_python, standalone, tmp_path / "plain-home")
    stranger = python_driver(client_python, standalone, tmp_path / "stranger-home", trust=pki.other_ca.cert)
    try:
        round_trip(proxied, over_tls, "Vault", "Keepers")
        for refused in (in_clear, stranger):
            started = time.monotonic()
            answer = refused.call("producer", topics=["Vault"])
            if answer["ok"]:  # the client starts without its route; the send is what fails
                answer = refused.call("send", topic="Vault", body="x")
            assert not answer["ok"], answer
            assert time.monotonic() - started < 30
    finally:
        for driver in (over_tls, in_clear, stranger):
            driver.close()


def test_the_node_client_over_tls(secured, client_node, pki, tmp_path):  # noqa: F811
    proxied, _, standalone = secured
    node = node_driver(client_node, standalone, tmp_path / "node-home", trust=pki.ca.cert)
    try:
        round_trip(proxied, node, "NodeVault", "NodeKeepers")
    finally:
        node.close()
