"""Raft messages between the members of a DLedger group, over TCP on the broker's event loop.

Each member listens on its `dLegerPeers` address and keeps one outbound connection to every other
member; a message goes out on the sender's connection, so each direction of a link is one ordered
stream. Frames are a u32 length and one `wire` frame. A message for a peer that is unreachable is
dropped: Raft resends what matters on the next heartbeat, so a queue would only add stale traffic.

With the broker's TLS settings the Raft port is TLS as its HA port is (docs/security.md): it listens
with the client port's certificate and mode, and a member dials the others with its client context.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from collections.abc import Callable, Sequence

from ferrymq.ha.dledger import wire
from ferrymq.ha.dledger.messages import Message
from ferrymq.net.listener import TLSServer, start_stream_server
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.net.tls import ServerTLS, handshake_failure

log = logging.getLogger(__name__)

LENGTH = struct.Struct(">I")
MAX_FRAME = 64 << 20
RECONNECT_DELAY = 0.1  # s between attempts to reach a peer that is down
MAX_RECONNECT_DELAY = 5.0  # s, for a peer that keeps closing the connection at once
HIGH_WATER = 32 << 20  # bytes buffered for a peer beyond which messages are dropped, not queued


class PeerTransport:
    def __init__(
        self,
        self_id: str,
        peers: dict[str, tuple[str, int]],
        on_message: Callable[[Message], None],
        *,
        server_tls: ServerTLS | None = None,
        client_tls: ssl.SSLContext | None = None,
    ) -> None:
        """`server_tls`: the listening port's TLS; `client_tls`: the context to dial the others with."""
        self.self_id = self_id
        self.peers = peers
        self._on_message = on_message
        self.server_tls = server_tls
        self.client_tls = client_tls
        self._tasks = BackgroundTasks(f"DLedger transport {self_id}")
        self._writers: dict[str, asyncio.StreamWriter] = {}
        self._server: asyncio.Server | TLSServer | None = None
        self._inbound: set[asyncio.StreamWriter] = set()
        self._runs = wire.RunCache()

    async def start(self) -> None:
        host, port = self.peers[self.self_id]
        self._server = await start_stream_server(self._serve, host, port, tls=self.server_tls)
        for peer in self.peers:
            if peer != self.self_id:
                self._tasks.spawn(self._link(peer), f"DLedger link to {peer}")

    def send(self, messages: Sequence[Message]) -> None:
        """Send in order, with one write per peer (a Ready often holds several messages for one)."""
        frames: dict[str, list[bytes | memoryview]] = {}
        for m in messages:
            out = frames.get(m.dst)
            if out is None:
                writer = self._writers.get(m.dst)
                if writer is None or writer.is_closing():
                    continue
                if writer.transport.get_write_buffer_size() > HIGH_WATER:
                    continue
                out = frames[m.dst] = []
            parts = wire.encode(m, self._runs)
            out.append(LENGTH.pack(sum(len(p) for p in parts)))
            out += parts
        for dst, out in frames.items():
            self._writers[dst].writelines(out)

    async def close(self) -> None:
        await self._tasks.close()
        if self._server is not None:
            self._server.close()
        for writer in [*self._writers.values(), *self._inbound]:
            writer.close()
        self._writers.clear()

    async def _link(self, peer: str) -> None:
        """Keep a connection to `peer`: connect, wait until it breaks, connect again."""
        host, port = self.peers[peer]
        tls = self.client_tls
        failed = ""
        delay = RECONNECT_DELAY
        while True:
            try:
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=tls, server_hostname=host if tls else None
                )
            except ssl.SSLError as e:  # wrong CA or name: say so once, keep trying (files may be fixed)
                if str(e) != failed:
                    failed = str(e)
                    log.error("DLedger %s: %s", self.self_id, handshake_failure(f"{peer} {host}:{port}", e))
                await asyncio.sleep(RECONNECT_DELAY)
                continue
            except OSError:
                await asyncio.sleep(RECONNECT_DELAY)
                continue
            failed = ""
            opened = asyncio.get_running_loop().time()
            self._writers[peer] = writer
            log.info("DLedger %s: connected to %s", self.self_id, peer)
            try:
                await reader.read()  # the peer never writes here: this returns when the link breaks
            except OSError:
                pass
            finally:
                self._writers.pop(peer, None)
                writer.close()
            # a peer closing at once (a TLS-only port dialled in plaintext) is not dialled 10 times a second
            brief = asyncio.get_running_loop().time() - opened < 1.0
            delay = min(delay * 2, MAX_RECONNECT_DELAY) if brief else RECONNECT_DELAY
            await asyncio.sleep(delay)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._inbound.add(writer)
        try:
            while True:
                (size,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
                if size > MAX_FRAME:
                    raise wire.WireError(f"frame of {size} bytes")
                self._on_message(wire.decode(await reader.readexactly(size)))
        except (asyncio.IncompleteReadError, OSError):
            pass
        except wire.WireError as e:
            log.warning("DLedger %s: dropping a peer connection: %s", self.self_id, e)
        finally:
            self._inbound.discard(writer)
            writer.close()
