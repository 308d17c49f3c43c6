"""The replica's HA client: connect to the master's HA port, handshake, cut a divergent tail, copy.

The handshake compares epoch entries (store/epoch.py): the replica truncates its CommitLog and
ConsumeQueues to the last offset both logs agree on, then reports its max offset and appends the
master's bytes verbatim at exactly that offset; its own dispatcher builds ConsumeQueues and index.
A master older than the epoch this replica was told about is refused (fencing). Connection losses
and refusals are retried with a short back-off until the client is stopped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from ferrymq.ha.wire import (
    HAFrameError,
    MasterHandshake,
    MasterStreamDecoder,
    ReplicaHandshake,
    Transfer,
    ack,
    replica_handshake,
)
from ferrymq.store import StoreError
from ferrymq.store.epoch import EpochFile, consistent_offset

if TYPE_CHECKING:
    from ferrymq.broker.server import Broker

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 5.0
_RETRY_MIN, _RETRY_MAX = 0.1, 2.0


class HandshakeError(Exception):
    """The master and this replica cannot agree on a common log (or the master is stale)."""


class HAClient:
    def __init__(self, broker: Broker, master_ha_addr: str, min_epoch: int = 0) -> None:
        self.broker = broker
        self.master_ha_addr = master_ha_addr
        self.min_epoch = min_epoch  # masters of older epochs are fenced off
        self.connected = False
        self.confirm_offset = 0
        self._task: asyncio.Task | None = None
        self._stopped = False
        self.last_error: str | None = None  # why the last session ended
        self._writer: asyncio.StreamWriter | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop copying. A flag as well as a cancel: Python 3.11's wait_for can lose a cancellation."""
        self._stopped = True
        if self._writer is not None:
            self._writer.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=5.0)
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
                self.connected = False
                if self._writer is not None:
                    self._writer.close()
                    self._writer = None
            delay = _RETRY_MIN if time.monotonic() - started > 5 else min(delay * 2, _RETRY_MAX)
            await asyncio.sleep(delay)

    async def _session(self) -> None:
        broker = self.broker
        store, config = broker.store, broker.config
        host, port = self.master_ha_addr.rsplit(":", 1)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), CONNECT_TIMEOUT)
        self._writer = writer
        writer.write(replica_handshake(ReplicaHandshake(config.broker_id)))
        decoder = MasterStreamDecoder()
        housekeeping = config.ha_housekeeping_interval / 1000
        heartbeat = config.ha_send_heartbeat_interval / 1000
        frames: list = []
        while not frames:
            data = await asyncio.wait_for(reader.read(65536), housekeeping)
            if not data:
                raise ConnectionError("the master closed the connection")
            frames = decoder.feed(data)
        hello = frames.pop(0)
        if not isinstance(hello, MasterHandshake):
            raise HandshakeError("the master did not start with a handshake")
        await self._truncate(hello)
        writer.write(ack(store.commitlog.max_offset))
        self.connected = True
        log.info("replicating from %s at offset %d", self.master_ha_addr, store.commitlog.max_offset)
        last_ack = heard = time.monotonic()
        while True:
            reported, confirmed = store.commitlog.max_offset, self.confirm_offset
            for frame in frames:
                if not isinstance(frame, Transfer):
                    raise HandshakeError("a second handshake from the master")
                self._append(frame)
            if store.commitlog.max_offset != reported or self.confirm_offset != confirmed:
                broker.written()
            now = time.monotonic()
            if store.commitlog.max_offset != reported or now - last_ack >= heartbeat:
                writer.write(ack(store.commitlog.max_offset))
                last_ack = now
            try:
                async with asyncio.timeout(min(heartbeat, housekeeping)):  # a timer, not wait_for's task
                    data = await reader.read(1 << 18)
            except TimeoutError:
                if time.monotonic() - heard > housekeeping:  # a live master heartbeats well within this
                    raise
                frames = []
                continue
            if not data:
                raise ConnectionError("the master closed the connection")
            heard = time.monotonic()
            frames = decoder.feed(data)

    async def _truncate(self, hello: MasterHandshake) -> None:
        """Cut this replica's log back to where it agrees with the master's (the epoch rule)."""
        store, epochs = self.broker.store, self.broker.epochs
        point = truncation_point(
            epochs, store.commitlog.min_offset, store.commitlog.max_offset, hello, self.min_epoch
        )
        if point is not None:
            log.warning(
                "replica truncates its log from %d to %d to match the master",
                store.commitlog.max_offset,
                point,
            )
            await asyncio.to_thread(store.truncate, point)
            epochs.truncate_from(point)
            self.broker.written()

    def _append(self, frame: Transfer) -> None:
        store, epochs = self.broker.store, self.broker.epochs
        self.confirm_offset = frame.confirm_offset
        if self.broker.config.enable_controller_mode:  # RocketMQ's readUnCommitted = false
            store.dispatcher.limit = frame.confirm_offset
        if not frame.body:
            return  # a heartbeat
        if frame.offset != store.commitlog.max_offset:
            raise HandshakeError(
                f"master sent offset {frame.offset}, replica is at {store.commitlog.max_offset}"
            )
        if frame.epoch < epochs.last_epoch:
            raise HandshakeError(f"master sent epoch {frame.epoch} after epoch {epochs.last_epoch}")
        if frame.epoch > epochs.last_epoch:
            epochs.append(frame.epoch, frame.epoch_start)  # durable before the bytes it covers
        store.append_replicated(frame.offset, frame.body)


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
    if point < 0:
        raise HandshakeError("no common epoch with the master: the logs cannot be reconciled")
    return point if point < local_max else None
