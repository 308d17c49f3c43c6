"""The proxy's gRPC credentials: certificates rotated without a restart, a half-written file ignored,
and client certificates required when asked for. A one-method server stands in for the proxy."""

from __future__ import annotations

import os
import shutil

import grpc
import pytest

from ferrymq.net.tls import ServerTLS
from ferrymq.proxy.tls import server_credentials
from tests.pki import Pair, pki  # noqa: F401  (fixture)

ECHO = "/ferrymq.test.Echo/Ping"


async def started(tls: ServerTLS) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("ferrymq.test.Echo", {"Ping": handler})]
    )
    port = server.add_secure_port("127.0.0.1:0", server_credentials(tls))
    await server.start()
    return server, port


async def ping(port: int, ca: Pair, client: Pair | None = None) -> bytes:
    chain = (client.key.read_bytes(), client.cert.read_bytes()) if client else (None, None)
    credentials = grpc.ssl_channel_credentials(ca.cert.read_bytes(), *chain)
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
        return await channel.unary_unary(ECHO)(b"ping", timeout=5)


def install(pair: Pair, cert, key) -> None:
    """Put `pair` in place the way rotation tools do: a complete file renamed over the old one."""
    for source, target in ((pair.key, key), (pair.cert, cert)):
        shutil.copy(source, f"{target}.new")
        os.replace(f"{target}.new", target)


async def test_rotated_certificates_serve_new_channels(pki, tmp_path):  # noqa: F811
    cert, key = tmp_path / "proxy.pem", tmp_path / "proxy.key"
    install(pki.server, cert, key)
    server, port = await started(ServerTLS("enforcing", str(cert), str(key)))
    try:
        assert await ping(port, pki.ca) == b"ping"
        install(pki.issue("rotated", "ferrymq proxy rotated", ca=pki.other_ca), cert, key)
        assert await ping(port, pki.other_ca) == b"ping"  # the new certificate, from the other CA
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await ping(port, pki.ca)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        cert.write_text("half written")
        assert await ping(port, pki.other_ca) == b"ping"  # the last good one stays
    finally:
        await server.stop(None)


async def test_required_client_certificates(pki):  # noqa: F811
    tls = ServerTLS("enforcing", str(pki.server.cert), str(pki.server.key),
                    trust_cert_path=str(pki.ca.cert), client_auth="require")  # fmt: skip
    server, port = await started(tls)
    try:
        assert await ping(port, pki.ca, pki.client) == b"ping"
        with pytest.raises(grpc.aio.AioRpcError):
            await ping(port, pki.ca)
    finally:
        await server.stop(None)
