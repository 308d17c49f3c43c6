"""MetricsServer: ``/metrics``, ``/health/live`` and ``/health/ready`` over a small HTTP/1.1 server.

It runs on the role's own event loop, so collectors read the server's state between two of its
callbacks and never see a table half changed; the text is then written in a worker thread, so a
broker with thousands of series does not hold its loop for the whole scrape. Only GET and HEAD of
these paths are served, with keep-alive (Prometheus keeps its connection); anything else gets a
plain 4xx, a request line or header that is too long or too slow closes the connection.
"""

from __future__ import annotations

import asyncio
import logging

from ferrymq.metrics.exposition import CONTENT_TYPE, render
from ferrymq.metrics.registry import Registry

log = logging.getLogger(__name__)

_IDLE_S = 75.0  # a connection quiet for this long is closed
_MAX_LINE = 8192
_MAX_HEADERS = 100
_TEXT = "text/plain; charset=utf-8"
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}


class BadRequest(Exception):
    pass


class MetricsServer:
    def __init__(self, registry: Registry, host: str, port: int) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        """Listen on host:port (0: any free port); the port bound."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=_MAX_LINE)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics and health on http://%s:%d/metrics", self.host, self.port)
        return self.port

    async def close(self) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        for writer in list(self._connections):
            writer.close()
        await server.wait_closed()

    async def answer(self, method: str, target: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for one request."""
        path = target.split("?", 1)[0]
        if path not in ("/metrics", "/health/live", "/health/ready"):
            return 404, _TEXT, b"not found: try /metrics, /health/live or /health/ready\n"
        if method not in ("GET", "HEAD"):
            return 405, _TEXT, b"only GET and HEAD\n"
        if path == "/metrics":
            families = list(self.registry.collect())
            return 200, CONTENT_TYPE, await asyncio.to_thread(render, families)
        if path == "/health/live":
            return 200, _TEXT, b"live\n"  # the event loop answered: the process is not stuck
        reasons = self.registry.not_ready()
        if reasons:
            return 503, _TEXT, ("not ready: " + "; ".join(reasons) + "\n").encode()
        return 200, _TEXT, b"ready\n"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            while True:
                async with asyncio.timeout(_IDLE_S):
                    line = await reader.readline()
                    if not line:
                        return
                    keep_alive, method, target = await _read_request(line, reader)
                status, ctype, body = await self.answer(method, target)
                head = (
                    f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body)}\r\n"
                    f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
                ).encode()
                writer.write(head if method == "HEAD" else head + body)
                await writer.drain()
                if not keep_alive:
                    return
        except BadRequest as exc:
            writer.write(
                f"HTTP/1.1 400 Bad Request\r\nContent-Length: {len(str(exc)) + 1}\r\n"
                f"Connection: close\r\n\r\n{exc}\n".encode()
            )
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except ValueError:  # a line longer than the reader's limit
            pass
        finally:
            self._connections.discard(writer)
            writer.close()


async def _read_request(line: bytes, reader: asyncio.StreamReader) -> tuple[bool, str, str]:
    """(keep-alive, method, target) of a request whose first line is `line`; its headers are read."""
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest("expected 'METHOD /path HTTP/1.x'")
    method, target, version = parts
    keep_alive = version == "HTTP/1.1"
    for _ in range(_MAX_HEADERS):
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            return keep_alive, method, target
        name, _, value = header.decode("latin-1").partition(":")
        if name.strip().lower() == "connection":
            keep_alive = value.strip().lower() == "keep-alive" or (
                keep_alive and value.strip().lower() != "close"
            )
    raise BadRequest("too many headers")
