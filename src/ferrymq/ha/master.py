"""The master's HA service: accepts replicas on the HA port, streams them the CommitLog, tracks
their acks (SyncStateSet, waiting sends) and proposes SyncStateSet changes.

It listens whatever the broker's role; a broker that is not a master turns replicas away, so a
role change needs no new socket. One task per replica writes, one reads its acks.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import deque
from collections.abc import Callable

from ferrymq.ha.host import HAConfig
from ferrymq.ha.qos import QosState, ReplicaProgress, ReplicationQos
from ferrymq.ha.sync_state import SyncStateTracker
from ferrymq.ha.wire import (
    Ack,
    HAFrameError,
    ReplicaHandshake,
    ReplicaStreamDecoder,
    master_handshake,
    transfer_header,
)
from ferrymq.net.listener import TLSServer, start_stream_server
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.net.tls import ServerTLS
from ferrymq.store import MessageStore, PutStatus
from ferrymq.store.epoch import EpochFile

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 10.0
_PROPOSAL_REPEAT = 5.0  # seconds before an unanswered proposal is made again
QOS_STEP = 0.1  # seconds between two looks of the replication QoS at the replicas
QOS_NARROW_EVERY = 0.2  # seconds in semi_sync before the window a send may run ahead halves


class HAService:
    def __init__(
        self, config: HAConfig, store: MessageStore, epochs: EpochFile,
        waits_for_replicas: Callable[[], bool], *, tls: ServerTLS | None = None,
    ) -> None:  # fmt: skip
        """`waits_for_replicas()`: whether sends wait for replicas now (then streams never linger);
        `tls`: the HA port's TLS, the same as the broker's client port."""
        self.tls = tls
        self.config = config
        self.store = store
        self.epochs = epochs
        self.waits_for_replicas = waits_for_replicas
        self.max_not_catchup = config.ha_max_time_slave_not_catchup / 1000
        self.tracker = SyncStateTracker(config.broker_id, self.max_not_catchup, time.monotonic())
        self.qos = self._new_qos()
        self.serving = False  # True while this broker is the master
        self.connections: dict[int, ReplicaConnection] = {}
        self._waiters: deque[tuple[int, int, asyncio.Future]] = deque()  # (offset needed, end, future)
        self._callbacks: list[Callable[[set[int]], object]] = []
        self._last_proposal: tuple[frozenset[int], float] | None = None
        self._server: asyncio.Server | TLSServer | None = None
        self._tasks = BackgroundTasks("HA service")
        self.port = 0

    # ------------------------------------------------------------------ life cycle

    async def start(self, host: str, port: int) -> int:
        """Listen on the HA port (0: any free port); return the port bound."""
        self._server = await start_stream_server(self._accept, host, port, tls=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        self._tasks.spawn(self._check_loop(), "SyncStateSet check")
        if self.qos is not None:
            self._tasks.spawn(self._qos_loop(), "replication QoS")
        return self.port

    async def stop(self) -> None:
        self.step_down()
        await self._tasks.close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 3.0)

    def serve_as_master(self, broker_id: int) -> None:
        """Start serving replicas as the master with id `broker_id` (the SyncStateSet restarts as {it})."""
        self.step_down()
        self.tracker = SyncStateTracker(broker_id, self.max_not_catchup, time.monotonic())
        self.qos = self._new_qos()
        self.serving = True

    def step_down(self) -> None:
        """Stop being a master: drop every replica and fail every waiting send (nothing more is acked)."""
        self.serving = False
        for conn in list(self.connections.values()):
            conn.close()
        self.connections.clear()
        self._fail_waiters()

    def _fail_waiters(self) -> None:
        """Answer every waiting send: not replicated (FLUSH_SLAVE_TIMEOUT)."""
        while self._waiters:
            _, _, future = self._waiters.popleft()
            if not future.done():
                future.set_result(False)

    def _new_qos(self) -> ReplicationQos | None:
        config = self.config
        if config.replication_qos_level < 0:
            return None  # broker_role and the controller-mode settings decide, as in RocketMQ
        return ReplicationQos(
            config.replication_qos_level, config.replication_qos_semi_sync_gap, self.max_not_catchup,
            QOS_NARROW_EVERY, time.monotonic(),
        )  # fmt: skip

    def holds_sends(self) -> bool:
        """Whether sends wait for replicas now (then streams never linger to coalesce)."""
        return self.waits_for_replicas() and (self.qos is None or self.qos.holds_sends)

    # ------------------------------------------------------------------ SyncStateSet

    @property
    def sync_state_set(self) -> set[int]:
        return set(self.tracker.sync_state_set)

    @property
    def confirm_offset(self) -> int:
        """The offset every SyncStateSet member has (a master's view; for a BROKER_HEARTBEAT)."""
        return self.tracker.confirm_offset(self.store.commitlog.max_offset)

    @property
    def sync_state_set_epoch(self) -> int:
        return self.tracker.epoch

    def set_sync_state_set(self, ids: set[int], epoch: int) -> None:
        """Adopt a SyncStateSet (the controller's answer, or in static mode our own proposal)."""
        self.tracker.apply(ids, epoch)
        self._last_proposal = None
        log.info("SyncStateSet is now %s (epoch %d)", sorted(self.tracker.sync_state_set), epoch)
        self._release()

    def on_sync_state_set_proposal(self, callback: Callable[[set[int]], object]) -> None:
        """Hear proposed SyncStateSets (a set of broker ids); a coroutine function is run as a task."""
        self._callbacks.append(callback)

    async def _check_loop(self) -> None:
        period = min(1.0, max(self.max_not_catchup / 3, 0.05))
        while True:
            await asyncio.sleep(period)
            if self.serving:
                self.check_sync_state_set()

    def check_sync_state_set(self) -> None:
        now = time.monotonic()
        join_at = None if self.qos is None else self.qos.join_at()
        proposal = self.tracker.proposal(self.store.commitlog.max_offset, now, join_at)
        if proposal is None:
            return
        key = frozenset(proposal)
        if (
            self._last_proposal
            and self._last_proposal[0] == key
            and now - self._last_proposal[1] < _PROPOSAL_REPEAT
        ):
            return
        self._last_proposal = (key, now)
        log.info("proposing SyncStateSet %s (was %s)", sorted(proposal), sorted(self.tracker.sync_state_set))
        for callback in self._callbacks:
            result = callback(set(proposal))
            if inspect.iscoroutine(result):
                self._tasks.spawn(result, "SyncStateSet proposal")
        if not self.config.enable_controller_mode:
            self.set_sync_state_set(proposal, self.tracker.epoch + 1)

    # ------------------------------------------------------------------ replication QoS

    async def _qos_loop(self) -> None:
        while True:
            await asyncio.sleep(QOS_STEP)
            if self.serving:
                self.step_qos()

    def step_qos(self) -> None:
        """Move the QoS state on from the replicas' progress; answer the sends it no longer holds."""
        qos, tracker = self.qos, self.tracker
        if qos is None:
            return
        before = qos.state
        replicas = [
            ReplicaProgress(i, r.acked, r.last_ack)
            for i, r in tracker.replicas.items()
            if r.connected and i in self.connections
        ]
        state = qos.step(replicas, time.monotonic(), synced=len(tracker.sync_state_set) > 1)
        if state is not before:
            log.info("replication QoS (level %d): %s -> %s", qos.level, before, state)
            if not qos.holds_sends:
                self._fail_waiters()
            if state is QosState.SEMI_SYNC and before is not QosState.SYNC:
                self.check_sync_state_set()  # idle groups join at once, not at the next check
        self._release()

    def qos_info(self) -> dict[str, str]:
        """The replication QoS for the broker's runtime info (a master's; nothing when it is off)."""
        qos = self.qos
        if qos is None or not self.serving:
            return {}
        return {"replicationQosLevel": str(qos.level), "replicationQosState": str(qos.state),
                "replicationQosWindow": str(qos.window)}  # fmt: skip

    # ------------------------------------------------------------------ acknowledgements

    def written(self) -> None:
        """New CommitLog bytes: wake the streams."""
        for conn in self.connections.values():
            conn.wake.set()

    def _acked(self, broker_id: int, offset: int) -> None:
        confirmed = self.frame_confirm_offset() if self.config.enable_controller_mode else None
        self.tracker.acked(broker_id, offset, time.monotonic())
        self._release()
        if confirmed is not None and self.frame_confirm_offset() > confirmed:
            self.written()  # replicas learn it at once: it is how far they may let consumers read

    def frame_confirm_offset(self) -> int:
        """The confirm offset replicas are sent: how far the whole SyncStateSet has the log when every
        member must ack, else the master's end (RocketMQ's getConfirmOffset)."""
        master_max = self.store.commitlog.max_offset
        if len(self.tracker.sync_state_set) <= 1 or not self.config.all_ack_in_sync_state_set:
            return master_max
        return self.tracker.confirm_offset(master_max)

    def replicated_offset(self) -> int:
        """How far the log is on enough replicas for a send to be acknowledged."""
        config = self.config
        master_max = self.store.commitlog.max_offset
        if self.qos is not None:  # sync: every SyncStateSet member; semi_sync: the best replica
            if self.qos.state is QosState.SYNC:
                return self.tracker.confirm_offset(master_max)
            return max((self.tracker.acked_offset(i) for i in self.connections), default=-1)
        if not config.enable_controller_mode:  # classic SYNC_MASTER: one replica has it
            return max((self.tracker.acked_offset(i) for i in self.connections), default=-1)
        if config.all_ack_in_sync_state_set:
            return self.tracker.confirm_offset(master_max)
        needed = config.in_sync_replicas - 1
        if needed <= 0:
            return master_max
        acks = sorted((self.tracker.acked_offset(i) for i in self.connections), reverse=True)
        return acks[needed - 1] if len(acks) >= needed else -1

    def replica_acks(self) -> dict[int, int]:
        """How far each connected replica (by broker id) has acknowledged the log (none while not serving)."""
        return {i: self.tracker.acked_offset(i) for i in self.connections} if self.serving else {}

    def _refusal(self) -> PutStatus | None:
        """Why a send cannot wait for replicas at all (RocketMQ answers at once then)."""
        config = self.config
        if not self.serving:
            return PutStatus.FLUSH_SLAVE_TIMEOUT
        if config.enable_controller_mode:
            if len(self.tracker.sync_state_set) < config.min_in_sync_replicas:
                return PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
            return None
        master_max = self.store.commitlog.max_offset
        if not any(
            master_max - self.tracker.acked_offset(i) < config.ha_max_gap_not_in_sync
            for i in self.connections
        ):
            return PutStatus.SLAVE_NOT_AVAILABLE
        return None

    async def wait_replicated(self, end_offset: int, timeout: float) -> PutStatus:
        """Wait until the bytes before `end_offset` are on the replicas the rules require."""
        qos = self.qos
        if qos is not None:
            if not self.serving:
                return PutStatus.FLUSH_SLAVE_TIMEOUT
            qos.sends.sent(end_offset)
            if not qos.holds_sends:  # availability first
                qos.sends.acknowledge(end_offset)
                return PutStatus.PUT_OK
            needed = end_offset if qos.state is QosState.SYNC else qos.sends.target(qos.window)
        else:
            refused = self._refusal()
            if refused is not None:
                return refused
            needed = end_offset
        if self.replicated_offset() >= needed:
            if qos is not None:
                qos.sends.acknowledge(end_offset)
            return PutStatus.PUT_OK
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((needed, end_offset, future))
        try:
            ok = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return PutStatus.FLUSH_SLAVE_TIMEOUT
        return PutStatus.PUT_OK if ok else PutStatus.FLUSH_SLAVE_TIMEOUT

    def _release(self) -> None:
        waiters = self._waiters
        if not waiters:
            return
        done = self.replicated_offset()
        qos = self.qos
        while waiters and (waiters[0][0] <= done or waiters[0][2].done()):
            _, end, future = waiters.popleft()
            if not future.done():
                future.set_result(True)
                if qos is not None:
                    qos.sends.acknowledge(end)

    # ------------------------------------------------------------------ connections

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        conn = ReplicaConnection(self, reader, writer)
        try:
            await conn.run()
        except HAFrameError as e:
            log.warning("HA peer %s sent a bad frame (%s); disconnecting it", peer, e)
        except (OSError, TimeoutError) as e:
            log.info("HA replica %s disconnected: %s", peer, e or type(e).__name__)
        finally:
            conn.close()
            if conn.broker_id is not None and self.connections.get(conn.broker_id) is conn:
                del self.connections[conn.broker_id]
                self.tracker.disconnected(conn.broker_id)
                self._release()


class ReplicaConnection:
    """One replica: handshake, then stream CommitLog bytes from its offset and read its acks."""

    def __init__(
        self, service: HAService, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        self.decoder = ReplicaStreamDecoder()
        self.broker_id: int | None = None
        self.wake = asyncio.Event()
        self._frames: deque = deque()

    def close(self) -> None:
        self.wake.set()
        self.writer.close()

    async def _next_frame(self, timeout: float):
        while not self._frames:
            async with asyncio.timeout(timeout):  # a timer, not wait_for's task per read: acks are frequent
                data = await self.reader.read(65536)
            if not data:
                raise ConnectionError("connection closed")
            self._frames.extend(self.decoder.feed(data))
        return self._frames.popleft()

    async def run(self) -> None:
        service = self.service
        store = service.store
        hello = await self._next_frame(HANDSHAKE_TIMEOUT)
        assert isinstance(hello, ReplicaHandshake)  # the decoder allows nothing else first
        if not service.serving:
            raise ConnectionError(f"replica {hello.broker_id} came, but this broker is not a master")
        self.writer.write(master_handshake(store.commitlog.max_offset, service.epochs.entries))
        first = await self._next_frame(HANDSHAKE_TIMEOUT)  # where the replica stands after truncating
        offset = max(first.max_offset, store.commitlog.min_offset if first.max_offset == 0 else 0)
        if store.read_commitlog(offset, 0) is None:
            raise ConnectionError(
                f"replica {hello.broker_id} is at offset {first.max_offset}, which this master does not hold "
                f"({store.commitlog.min_offset}..{store.commitlog.max_offset})"
            )
        old = service.connections.get(hello.broker_id)
        if old is not None:
            old.close()
        self.broker_id = hello.broker_id
        service.connections[hello.broker_id] = self
        service.tracker.connected(hello.broker_id, time.monotonic())
        service._acked(hello.broker_id, first.max_offset)
        log.info("replica %d attached at offset %d", hello.broker_id, offset)
        acks = service._tasks.spawn(self._read_acks(hello.broker_id), f"acks of replica {hello.broker_id}")
        try:
            await self._stream(hello.broker_id, offset, acks)
        finally:
            acks.cancel()

    async def _read_acks(self, broker_id: int) -> None:
        housekeeping = self.service.config.ha_housekeeping_interval / 1000
        try:
            while True:
                frame = await self._next_frame(housekeeping)
                if isinstance(frame, Ack):
                    self.service._acked(broker_id, frame.max_offset)
        except (HAFrameError, ConnectionError, TimeoutError, OSError) as e:
            log.info("replica %s: %s", broker_id, e or type(e).__name__)
            self.close()

    async def _stream(self, broker_id: int, offset: int, acks: asyncio.Task) -> None:
        service = self.service
        store, epochs, config = service.store, service.epochs, service.config
        batch = config.ha_transfer_batch_size
        heartbeat = config.ha_send_heartbeat_interval / 1000
        coalesce = config.ha_async_coalesce_ms / 1000
        tracker = service.tracker
        while not acks.done() and not self.writer.is_closing():
            master_max = store.commitlog.max_offset
            if offset < master_max:
                entry = epochs.entry_at(offset) or epochs.entries[0]
                limit = epochs.next_start(entry) or master_max  # a frame never spans two epochs
                stored = store.read_commitlog(offset, min(batch, limit - offset))
                if stored is None:
                    raise ConnectionError(f"offset {offset} is no longer stored (retention)")
                chunk: bytes | memoryview = stored
            else:
                entry = epochs.entry_at(offset) or epochs.entries[0]
                chunk = b""
            confirm = service.frame_confirm_offset()
            header = transfer_header(offset, len(chunk), entry.epoch, entry.start_offset, confirm)
            self.writer.writelines((header, chunk))  # one send for both
            offset += len(chunk)
            tracker.transferred(broker_id, master_max, time.monotonic())
            await self.writer.drain()
            if 0 < len(chunk) < batch and coalesce and not service.holds_sends():
                await asyncio.sleep(coalesce)
            if offset >= store.commitlog.max_offset:
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(heartbeat):
                        await self.wake.wait()
