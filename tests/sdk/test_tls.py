"""The SDK and the CLI against a NameServer and a Broker that speak TLS only (enforcing)."""

from __future__ import annotations

import asyncio
import time

import pytest
from click.testing import CliRunner

from ferrymq.cli.main import main
from ferrymq.client import ClientError, ClientTLS, Message, Producer, PullConsumer, SendStatus
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer
from tests.pki import client_settings, pki, server_settings  # noqa: F401  (fixture)

from ..broker.conftest import make_cluster  # noqa: F401  (fixture)


@pytest.fixture
async def tls_cluster(make_cluster, pki):  # noqa: F811
    """NameServer and Broker both enforcing TLS; the broker registers with the NameServer over TLS."""
    namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0, **server_settings(pki)))
    await namesrv.start()
    return await make_cluster(namesrv, **server_settings(pki), **client_settings(pki))


async def test_produce_and_consume_over_tls(tls_cluster, pki):  # noqa: F811
    tls = ClientTLS(trust_cert_path=str(pki.ca.cert))
    async with Producer("PG", tls_cluster.namesrv_addr, tls=tls) as producer:
        sent = await producer.send_batch([Message("Secured", b"m%d" % i) for i in range(32)])
        assert sent.status is SendStatus.SEND_OK
    await tls_cluster.settled()
    async with PullConsumer("CG", tls_cluster.namesrv_addr, consume_from="first", tls=tls) as consumer:
        await consumer.subscribe("Secured")
        got: list[bytes] = []
        deadline = time.monotonic() + 10
        while len(got) < 32 and time.monotonic() < deadline:
            got += [m.body for m in await consumer.poll(1.0)]
    assert sorted(got) == sorted(b"m%d" % i for i in range(32))


async def test_a_plaintext_sdk_is_refused_with_an_error_not_a_hang(tls_cluster):
    async with asyncio.timeout(15), Producer("PG", tls_cluster.namesrv_addr, send_timeout=2) as producer:
        with pytest.raises(ClientError):
            await producer.send(Message("Secured", b"in the clear"))


async def test_an_sdk_trusting_another_ca_gets_a_clear_error(tls_cluster, pki):  # noqa: F811
    stranger = ClientTLS(trust_cert_path=str(pki.other_ca.cert))
    producer = Producer("PG", tls_cluster.namesrv_addr, tls=stranger, send_timeout=2)
    async with asyncio.timeout(15), producer:
        with pytest.raises(ClientError, match="certificate not trusted"):
            await producer.send(Message("Secured", b"to a stranger"))


async def test_cli_produce_and_consume_with_tls_ca(tls_cluster, pki):  # noqa: F811
    namesrv = ["--namesrv", tls_cluster.namesrv_addr, "--topic", "ByShell", "--tls-ca", str(pki.ca.cert)]
    produced = await asyncio.to_thread(CliRunner().invoke, main, ["produce", *namesrv, "one", "two"])
    assert produced.exit_code == 0, produced.output
    assert produced.output.count("SEND_OK") == 2
    consume = ["consume", *namesrv, "--group", "G", "--from", "first", "--count", "2", "--timeout", "10"]
    consumed = await asyncio.to_thread(CliRunner().invoke, main, consume)
    assert consumed.exit_code == 0, consumed.output
    assert "one" in consumed.output and "two" in consumed.output
