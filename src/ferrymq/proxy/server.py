"""The proxy's gRPC server (grpc.aio on the caller's event loop): in a broker process over its local
message service, or alone over a remote one. Owns nothing but the server; the caller owns the
message service."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import grpc

from ferrymq.messaging.api import MessageService
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.net.tls import ServerTLS
from ferrymq.proxy.clients import LiveClients
from ferrymq.proxy.relay import Relay
from ferrymq.proxy.renewal import Renewals
from ferrymq.proxy.service import MessagingServicer
from ferrymq.proxy.tls import server_credentials
from ferrymq.proxy.v2 import messaging_pb2 as pb
from ferrymq.proxy.v2 import messaging_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

DEFAULT_PORT = 8081  # RocketMQ proxy's grpcServerPort
# open receives are cut after this on close; their messages come back after their invisible time
STOP_GRACE_S = 2.0
MAX_MESSAGE_BYTES = 130 * 1024 * 1024  # a batch of messages of up to 4 MiB each, with room to spare


class ProxyServer:
    def __init__(
        self, service: MessageService, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
        *, renewals: Renewals | None = None, tls: ServerTLS | None = None, plaintext_port: int | None = None,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    ) -> None:  # fmt: skip
        """``tls``: serve TLS on ``port``; in permissive mode, plaintext too on ``plaintext_port``
        (gRPC cannot serve both on one port). ``interceptors``: run on every call before the
        servicer (e.g. authentication)."""
        if tls is not None and tls.permissive and plaintext_port is None:
            raise ValueError(
                "a permissive gRPC proxy needs a plaintext port: gRPC serves TLS or not per port"
            )
        self.service = service
        self.tls = tls
        self.plaintext_port = plaintext_port if tls is not None else None
        self.interceptors = tuple(interceptors)
        self.host = host
        self.port = port
        self.renewals = renewals if renewals is not None else Renewals(service)
        self.clients = LiveClients(service)
        self.relay = Relay(self.clients)
        self._server: grpc.aio.Server | None = None
        self._tasks = BackgroundTasks("proxy")

    async def start(self) -> int:
        """Serve on host:port (0: a free port); returns the port bound."""
        server = grpc.aio.server(
            interceptors=self.interceptors,
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),  # a port taken by another proxy is an error, not shared
            ],
        )
        bound = self.port = _add_port(server, self.host, self.port, self.tls)
        if self.plaintext_port is not None:
            self.plaintext_port = _add_port(server, self.host, self.plaintext_port, None)
        endpoints = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=self.host, port=bound)])
        servicer = MessagingServicer(self.service, endpoints, self.renewals, self.clients, self.relay)
        self.service.serve_client_calls(self.relay)
        pb_grpc.add_MessagingServiceServicer_to_server(servicer, server)
        await server.start()
        self._server = server
        self._tasks.spawn(self.renewals.run(), "proxy-renewals")
        self._tasks.spawn(self.clients.run(), "proxy-client-heartbeats")
        if self.tls is None:
            log.info("proxy (gRPC v2) listening on %s:%d", self.host, bound)
        else:
            plaintext = f", plaintext on {self.plaintext_port}" if self.plaintext_port is not None else ""
            log.info(
                "proxy (gRPC v2) listening on %s:%d (TLS %s)%s", self.host, bound, self.tls.mode, plaintext
            )
        return bound

    @property
    def serving(self) -> bool:
        return self._server is not None

    async def close(self) -> None:
        if self._server is not None:
            await self._server.stop(STOP_GRACE_S)
            self._server = None
        await self._tasks.close()
        await self.clients.close()


def _add_port(server: grpc.aio.Server, host: str, port: int, tls: ServerTLS | None) -> int:
    """Listen on host:port (0: a free one), with TLS if ``tls``; the port bound."""
    address = f"{host}:{port}"
    try:
        if tls is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, server_credentials(tls))
    except RuntimeError:  # grpc says no more than "failed to bind"
        bound = 0
    if bound == 0:
        raise OSError(f"cannot listen on {address} (in use?)")
    return bound
