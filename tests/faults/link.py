"""A TCP relay the test can freeze and cut, standing for the network between a slave and its master's
HA port: frozen, it holds what either side sends (the master still sees a connected replica that
acknowledges nothing new, as over a stalled network); cut, it closes both sides and drops what it
held, so the slave never gets it."""

from __future__ import annotations

import asyncio
import contextlib


class Link:
    def __init__(self, target: str) -> None:
        self.target = target
        self._thawed = asyncio.Event()
        self._thawed.set()
        self._server: asyncio.Server | None = None
        self._pairs: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter, list[asyncio.Task]]] = []

    async def start(self) -> str:
        """Listen on a free loopback port; its address."""
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def freeze(self) -> None:
        self._thawed.clear()

    def cut(self) -> None:
        """Close every relayed connection, dropping what was held; later connections are relayed."""
        for left, right, pumps in self._pairs:
            for pump in pumps:
                pump.cancel()
            left.close()
            right.close()
        self._pairs.clear()
        self._thawed.set()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port = self.target.rsplit(":", 1)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.close()
            return
        pumps = [
            asyncio.create_task(self._pump(reader, upstream_writer)),
            asyncio.create_task(self._pump(upstream_reader, writer)),
        ]
        self._pairs.append((writer, upstream_writer, pumps))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await reader.read(65536):
                await self._thawed.wait()
                writer.write(data)
                await writer.drain()
        writer.close()
