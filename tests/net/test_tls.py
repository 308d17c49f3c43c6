"""The remoting transport over TLS on 127.0.0.1: modes, bad peers, client certificates, rotation."""

import asyncio
import contextlib
import logging
import os
import shutil
import ssl

import pytest

from ferrymq.net import RemotingClient, RemotingConnectionError, RemotingServer
from ferrymq.net.tls import ClientTLS, ServerTLS, TLSConfigError, TLSSettings
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.remoting import RemotingCommand
from tests.net.test_transport import ECHO, address, echo
from tests.pki import pki  # noqa: F401  (fixture)


def server_tls(pki, mode="enforcing", **kwargs) -> ServerTLS:  # noqa: F811
    return ServerTLS(mode, str(pki.server.cert), str(pki.server.key), handshake_timeout=1.0, **kwargs)


async def started(tls: ServerTLS | None) -> RemotingServer:
    server = RemotingServer("127.0.0.1", 0, tls=tls)
    server.register(ECHO, echo)
    await server.start()
    return server


async def echo_through(client: RemotingClient, server: RemotingServer) -> bytes:
    request = RemotingCommand(ECHO, body=b"over the wire")
    response = await client.invoke(address(server), request, timeout=3)
    assert response.code == ResponseCode.SUCCESS
    return bytes(response.body)


def trusting(pki, **kwargs) -> RemotingClient:  # noqa: F811
    context = ClientTLS(trust_cert_path=str(pki.ca.cert), **kwargs).context()
    return RemotingClient(tls=context, connect_timeout=2)


async def test_enforcing_serves_tls_and_refuses_plaintext(pki, caplog):  # noqa: F811
    server = await started(server_tls(pki))
    tls_client, plain_client = trusting(pki), RemotingClient(connect_timeout=2)
    try:
        assert await echo_through(tls_client, server) == b"over the wire"
        with caplog.at_level(logging.WARNING, "ferrymq.net.listener"), pytest.raises(RemotingConnectionError):
            await echo_through(plain_client, server)
        assert "refused a plaintext connection" in caplog.text and "is TLS only" in caplog.text
        assert await echo_through(trusting(pki), server) == b"over the wire"  # still serving
    finally:
        await tls_client.close()
        await plain_client.close()
        await server.stop(grace=1)


async def test_permissive_serves_both_on_one_port(pki):  # noqa: F811
    server = await started(server_tls(pki, "permissive"))
    tls_client, plain_client = trusting(pki), RemotingClient(connect_timeout=2)
    try:
        assert await echo_through(tls_client, server) == b"over the wire"
        assert await echo_through(plain_client, server) == b"over the wire"
        assert len(server.connections) == 2
    finally:
        await tls_client.close()
        await plain_client.close()
        await server.stop(grace=1)


async def test_a_server_signed_by_another_ca_fails_the_handshake_clearly(pki, caplog):  # noqa: F811
    server = await started(server_tls(pki))
    context = ClientTLS(trust_cert_path=str(pki.other_ca.cert)).context()
    client = RemotingClient(tls=context, connect_timeout=2)
    try:
        with pytest.raises(RemotingConnectionError, match="certificate not trusted"):
            await echo_through(client, server)
        assert await echo_through(trusting(pki), server) == b"over the wire"
    finally:
        await client.close()
        await server.stop(grace=1)


async def test_a_tls_client_on_a_plaintext_port_gets_a_clear_error(pki):  # noqa: F811
    server = await started(None)
    client = trusting(pki)
    try:
        async with asyncio.timeout(5):
            with pytest.raises(RemotingConnectionError, match=r"TLS handshake with .* failed"):
                await echo_through(client, server)
        assert await echo_through(RemotingClient(), server) == b"over the wire"
    finally:
        await client.close()
        await server.stop(grace=1)


@pytest.mark.parametrize(
    "garbage",
    [b"\x16\x03\x01\x00\x05hello-not-tls", b"\x16", b"GET / HTTP/1.1\r\n\r\n", os.urandom(64)],
    ids=["bad-record", "one-byte", "http", "random"],
)
async def test_garbage_on_a_tls_port_is_closed_and_the_server_lives(pki, garbage):  # noqa: F811
    server = await started(server_tls(pki))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(garbage)
        await writer.drain()
        async with asyncio.timeout(5):  # handshake_timeout is 1 s
            await closed_by_peer(reader)
        writer.close()
        assert await echo_through(trusting(pki), server) == b"over the wire"
    finally:
        await server.stop(grace=1)


async def closed_by_peer(reader: asyncio.StreamReader) -> None:
    """Wait until the server hangs up: an end of stream, or a reset when our bytes went unread."""
    with contextlib.suppress(ConnectionResetError):
        assert await reader.read() == b""


async def test_a_silent_connection_is_closed_after_the_handshake_timeout(pki):  # noqa: F811
    server = await started(server_tls(pki, "permissive"))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        async with asyncio.timeout(5):
            await closed_by_peer(reader)
        writer.close()
    finally:
        await server.stop(grace=1)


async def test_a_stopped_tls_server_lets_its_port_go(pki):  # noqa: F811
    server = await started(server_tls(pki, "permissive"))
    port = server.port
    await server.stop(grace=1)
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)


async def test_required_client_certificates(pki):  # noqa: F811
    tls = server_tls(pki, trust_cert_path=str(pki.ca.cert), client_auth="require")
    server = await started(tls)
    anonymous = trusting(pki)
    known = trusting(pki, cert_path=str(pki.client.cert), key_path=str(pki.client.key))
    try:
        assert await echo_through(known, server) == b"over the wire"
        with pytest.raises(RemotingConnectionError):  # TLS 1.3: refused right after the handshake
            await echo_through(anonymous, server)
    finally:
        await anonymous.close()
        await known.close()
        await server.stop(grace=1)


async def peer_common_name(port: int, context: ssl.SSLContext) -> str:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1")
    subject = dict(item for rdn in writer.get_extra_info("peercert")["subject"] for item in rdn)
    writer.close()
    return subject["commonName"]


async def test_rotated_certificates_apply_to_new_connections(pki, tmp_path):  # noqa: F811
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    shutil.copy(pki.server.cert, cert)
    shutil.copy(pki.server.key, key)
    tls = ServerTLS("enforcing", str(cert), str(key), handshake_timeout=1.0)
    server = await started(tls)
    context = ClientTLS(trust_cert_path=str(pki.ca.cert)).context()
    client = RemotingClient(tls=context)
    try:
        assert await peer_common_name(server.port, context) == "ferrymq server"
        assert await echo_through(client, server) == b"over the wire"  # a connection made before
        renewed = pki.issue("renewed", "ferrymq server renewed")
        shutil.copy(renewed.key, key)
        key.with_suffix(".tmp").write_bytes(renewed.cert.read_bytes())
        os.replace(key.with_suffix(".tmp"), cert)  # as cert-manager and friends do: a rename
        assert await peer_common_name(server.port, context) == "ferrymq server renewed"
        assert tls.reloads == 1
        assert await echo_through(client, server) == b"over the wire"  # the old connection lives on
        cert.write_text("half written")  # a broken file keeps the last good context
        assert await peer_common_name(server.port, context) == "ferrymq server renewed"
    finally:
        await client.close()
        await server.stop(grace=1)


def test_bad_settings_are_clear_errors(pki, tmp_path):  # noqa: F811
    with pytest.raises(TLSConfigError, match="tls_server_mode must be one of"):
        TLSSettings(tls_server_mode="strict").server_tls()
    with pytest.raises(TLSConfigError, match="needs tls_server_cert_path"):
        TLSSettings(tls_server_mode="enforcing").server_tls()
    with pytest.raises(TLSConfigError, match="no such file"):
        TLSSettings(tls_server_mode="enforcing", tls_server_cert_path=str(tmp_path / "x"),
                    tls_server_key_path=str(tmp_path / "y")).server_tls()  # fmt: skip
    with pytest.raises(TLSConfigError, match="cannot load"):
        TLSSettings(tls_server_mode="enforcing", tls_server_cert_path=str(pki.server.cert),
                    tls_server_key_path=str(pki.client.key)).server_tls()  # fmt: skip
    assert TLSSettings().server_tls() is None and TLSSettings().client_tls() is None
