"""The replica's HA client: connect to the master's HA port, handshake, cut a divergent tail, copy.

The handshake compares epoch entries (store/epoch.py): the replica truncates its CommitLog and
ConsumeQueues to the last offset both logs agree on, then reports its max offset and appends the
master's bytes verbatim at exactly that offset; its own dispatcher builds ConsumeQueues and index.
The bytes are read from the socket straight into the mapped CommitLog (_Receiver), so a replica's
copy costs a system call per transfer, not Python work per byte.
A master older than the epoch this replica was told about is refused (fencing). Connection losses
and refusals are retried with a short back-off until the client is stopped.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from typing import cast

from ferrymq.ha.host import HAConfig
from ferrymq.ha.wire import (
    TRANSFER_HEADER_SIZE,
    HAFrameError,
    MasterHandshake,
    MasterStreamDecoder,
    ReplicaHandshake,
    TransferHeader,
    ack,
    read_transfer_header,
    replica_handshake,
)
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.store import MessageStore, StoreError
from ferrymq.store.epoch import EpochFile, consistent_offset

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 5.0
_RETRY_MIN, _RETRY_MAX = 0.1, 2.0
# Headers (and small transfers whole) are read through this; a body's rest goes to the CommitLog.
_SCRATCH = 4096


class HandshakeError(Exception):
    """The master and this replica cannot agree on a common log (or the master is stale)."""


class HAClient:
    def __init__(
        self, config: HAConfig, store: MessageStore, epochs: EpochFile, written: Callable[[], None],
        master_ha_addr: str, min_epoch: int = 0, tls: ssl.SSLContext | None = None,
    ) -> None:  # fmt: skip
        """`written()`: after bytes were appended (the broker dispatches them); `tls`: the client
        context for a master whose HA port speaks TLS."""
        self.tls = tls
        self.config = config
        self.store = store
        self.epochs = epochs
        self.written = written
        self.master_ha_addr = master_ha_addr
        self.min_epoch = min_epoch  # masters of older epochs are fenced off
        self.connected = False
        self.confirm_offset = 0
        self.heard_master = False  # a transfer header came in this session (so confirm_offset is news)
        self._tasks = BackgroundTasks(f"HA client of {master_ha_addr}")
        self._stopped = False
        self.last_error: str | None = None  # why the last session ended
        self._transport: asyncio.Transport | None = None

    def start(self) -> None:
        self._tasks.spawn(self._run(), "replication")

    async def stop(self) -> None:
        """Stop copying. A flag as well as a cancel: Python 3.11's wait_for can lose a cancellation."""
        self._stopped = True
        if self._transport is not None:
            self._transport.close()
        await self._tasks.close()
        self.connected = False

    async def _run(self) -> None:
        delay = _RETRY_MIN
        while not self._stopped:
            started = time.monotonic()
            try:
                await self._session()
            except (OSError, TimeoutError, HAFrameError, HandshakeError, StoreError) as e:
                if self._stopped:
                    return
                self.last_error = str(e) or type(e).__name__
                log.warning(
                    "replication from %s stopped: %s; reconnecting", self.master_ha_addr, self.last_error
                )
            finally:
                self.connected = self.heard_master = False
                if self._transport is not None:
                    self._transport.close()
                    self._transport = None
            delay = _RETRY_MIN if time.monotonic() - started > 5 else min(delay * 2, _RETRY_MAX)
            await asyncio.sleep(delay)

    async def _session(self) -> None:
        config = self.config
        host, port = self.master_ha_addr.rsplit(":", 1)
        loop = asyncio.get_running_loop()
        transport, receiver = await asyncio.wait_for(
            loop.create_connection(
                lambda: _Receiver(self),
                host,
                int(port),
                ssl=self.tls,
                server_hostname=host if self.tls else None,
            ),
            CONNECT_TIMEOUT,
        )
        self._transport = transport
        if transport.is_closing():  # accepted and closed at once (a relay whose master is down)
            raise ConnectionResetError("the master closed the connection")
        transport.write(replica_handshake(ReplicaHandshake(config.broker_id)))
        housekeeping = config.ha_housekeeping_interval / 1000
        heartbeat = config.ha_send_heartbeat_interval / 1000
        hello = await asyncio.wait_for(asyncio.shield(receiver.hello), housekeeping)
        await self._truncate(hello)
        receiver.start_streaming()
        self.connected = True
        log.info("replicating from %s at offset %d", self.master_ha_addr, self.store.commitlog.max_offset)
        while True:
            await asyncio.wait({receiver.closed}, timeout=min(heartbeat, housekeeping))
            if receiver.closed.done():
                receiver.closed.result()  # raises why
            now = time.monotonic()
            if now - receiver.heard > housekeeping:  # a live master heartbeats well within this
                raise TimeoutError(f"nothing from the master for {housekeeping:g} s")
            if now - receiver.acked_at >= heartbeat:
                receiver.send_ack()

    async def _truncate(self, hello: MasterHandshake) -> None:
        """Cut this replica's log back to where it agrees with the master's (the epoch rule)."""
        store, epochs = self.store, self.epochs
        point = truncation_point(
            epochs, store.commitlog.min_offset, store.commitlog.max_offset, hello, self.min_epoch
        )
        if point is None:
            return
        emptied = point <= store.commitlog.min_offset  # no byte of any epoch it knows stays
        if point < store.commitlog.max_offset:
            log.warning(
                "replica truncates its log from %d to %d to match the master",
                store.commitlog.max_offset,
                point,
            )
            await asyncio.to_thread(store.truncate, point)
        epochs.truncate_from(0 if emptied else point)
        self.written()

    def transfer(self, header: TransferHeader) -> None:
        """Check a transfer header before its bytes are written (HandshakeError: this master's stream
        does not continue this log), and take its confirm offset and epoch."""
        store, epochs = self.store, self.epochs
        self.confirm_offset = header.confirm_offset
        self.heard_master = True
        if self.config.enable_controller_mode:  # RocketMQ's readUnCommitted = false
            store.dispatcher.limit = header.confirm_offset
        if not header.size:
            return  # a heartbeat
        if header.offset != store.commitlog.max_offset:
            raise HandshakeError(
                f"master sent offset {header.offset}, replica is at {store.commitlog.max_offset}"
            )
        if header.epoch < epochs.last_epoch:
            raise HandshakeError(f"master sent epoch {header.epoch} after epoch {epochs.last_epoch}")
        if header.epoch > epochs.last_epoch:
            epochs.append(header.epoch, header.epoch_start)  # durable before the bytes it covers


class _Receiver(asyncio.BufferedProtocol):
    """The replica's end of one HA connection.

    Until the master's handshake, bytes go through a scratch buffer to the frame decoder. Then
    transfer headers (and whatever of a body comes in the same read) go through the scratch buffer,
    and the rest of each body is read from the socket straight into the mapped CommitLog at the
    write position (MessageStore.replica_window). One ack a loop turn reports the new max offset.
    """

    def __init__(self, client: HAClient) -> None:
        self.client = client
        self.store = client.store
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.hello: asyncio.Future[MasterHandshake] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()  # fails with why the session ended
        self.heard = self.acked_at = time.monotonic()
        self.transport: asyncio.Transport | None = None
        self._decoder: MasterStreamDecoder | None = MasterStreamDecoder()  # None once streaming
        self._scratch = memoryview(bytearray(_SCRATCH))
        self._fill = 0
        self._body: memoryview | None = None  # the CommitLog bytes the current body still goes to
        self._end = 0  # the CommitLog offset after the bytes received so far
        self._reported = (-1, -1)  # (max offset, confirm offset) when the owner last heard
        self._turn_scheduled = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP connection's

    def connection_lost(self, exc: Exception | None) -> None:
        self._body = None
        self._fail(ConnectionError(f"the master closed the connection{f': {exc}' if exc else ''}"))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._body if self._body is not None else self._scratch[self._fill :]

    def buffer_updated(self, nbytes: int) -> None:
        self.heard = time.monotonic()
        try:
            if self._body is not None:
                self._received(self._body, nbytes)
            else:
                self._fill += nbytes
                if self._decoder is None:
                    self._headers()
                else:
                    self._handshake(self._decoder)
        except (HAFrameError, HandshakeError, StoreError) as e:
            self._fail(e)
            return
        if not self._turn_scheduled and self._decoder is None:
            self._turn_scheduled = True
            self.loop.call_soon(self._after_reads)

    def start_streaming(self) -> None:
        """The log is truncated: report where it ends, and take transfers from here on."""
        self._decoder = None
        self.send_ack()

    def send_ack(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(ack(self.store.commitlog.max_offset))
            self.acked_at = time.monotonic()

    def _handshake(self, decoder: MasterStreamDecoder) -> None:
        frames = decoder.feed(self._scratch[: self._fill])
        self._fill = 0
        if not frames or self.hello.done():
            if self.hello.done():
                raise HandshakeError("the master sent more before the replica's first ack")
            return
        if not isinstance(frames[0], MasterHandshake):
            raise HandshakeError("the master did not start with a handshake")
        if len(frames) > 1 or decoder.buffered:
            raise HandshakeError("the master sent more before the replica's first ack")
        self.hello.set_result(frames[0])

    def _headers(self) -> None:
        scratch, fill, pos = self._scratch, self._fill, 0
        while fill - pos >= TRANSFER_HEADER_SIZE:
            header = read_transfer_header(scratch, pos)
            pos += TRANSFER_HEADER_SIZE
            self.client.transfer(header)
            if not header.size:
                continue
            body = self.store.replica_window(header.offset, header.size)
            if len(body) < header.size:
                raise StoreError(f"a transfer at {header.offset} crosses the end of a CommitLog segment")
            self._body, self._end = body, header.offset
            here = min(fill - pos, header.size)
            if here:
                body[:here] = scratch[pos : pos + here]
                pos += here
                self._received(body, here)
            if self._body is not None:
                break  # the rest of the body comes straight from the socket
        rest = fill - pos
        if rest and pos:
            scratch[:rest] = bytes(scratch[pos:fill])  # part of the next header
        self._fill = rest

    def _received(self, body: memoryview, n: int) -> None:
        """`n` more bytes of `body` (the transfer being received) are in place."""
        self._end += n
        self.store.replicated(self._end)
        rest = body[n:]
        self._body = rest if len(rest) else None

    def _after_reads(self) -> None:
        """Once a loop turn: dispatch what arrived and ack it (the master streams on regardless)."""
        self._turn_scheduled = False
        state = (self.store.commitlog.max_offset, self.client.confirm_offset)
        if state == self._reported:
            return
        moved = state[0] != self._reported[0]
        self._reported = state
        self.client.written()
        if moved:
            self.send_ack()

    def _fail(self, error: Exception) -> None:
        for future in (self.hello, self.closed):
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved here: the session may be waiting on the other one
        if self.transport is not None:
            self.transport.abort()


def truncation_point(
    epochs: EpochFile, local_min: int, local_max: int, hello: MasterHandshake, min_epoch: int = 0
) -> int | None:
    """Where a replica holding [local_min, local_max) must cut its log to agree with the master that
    sent `hello` (None: nothing to cut); HandshakeError when it must not copy from that master."""
    known = max(min_epoch, epochs.last_epoch)
    if hello.last_epoch < known:
        raise HandshakeError(f"master at epoch {hello.last_epoch} is stale: this replica knows epoch {known}")
    if not epochs.entries:
        if local_max > local_min:
            raise HandshakeError(
                f"this replica holds data up to {local_max} but no epoch entries to compare; "
                f"clear its store to copy the master afresh"
            )
        return None
    point = consistent_offset(epochs.entries, local_max, hello.epochs, hello.max_offset)
    if point < 0 and local_max <= local_min:
        # it holds nothing (a group that never stored a message changed master): its epochs name no
        # byte, so it forgets them and copies the master from where its log stands
        return local_max
    if point < 0:
        raise HandshakeError("no common epoch with the master: the logs cannot be reconciled")
    return point if point < local_max else None
