"""asyncio remoting transport: servers, clients, request/response matching. Imports only ferrymq.protocol."""

from ferrymq.net.client import RemotingClient
from ferrymq.net.connection import Connection, ConnectionLimits
from ferrymq.net.dispatch import Handler
from ferrymq.net.errors import RemotingConnectionError, RemotingError, RemotingTimeoutError
from ferrymq.net.loop import install_uvloop
from ferrymq.net.server import RemotingServer

__all__ = [
    "Connection",
    "ConnectionLimits",
    "Handler",
    "RemotingClient",
    "RemotingConnectionError",
    "RemotingError",
    "RemotingServer",
    "RemotingTimeoutError",
    "install_uvloop",
]
