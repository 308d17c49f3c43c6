"""One member of a DLedger group on the broker's event loop: the Raft core with its I/O.

`DLedgerNode` drives `RaftNode` as raft.py asks: inbound frames, clock ticks and proposals go in;
each `Ready` is carried out in order (term and vote saved, the log made durable when the store
flushes synchronously, messages sent, committed entries applied). Proposals made in one loop turn
go to the core together, so concurrent sends share one append to each follower. A put is answered
once its entry is committed with the term it was proposed in and applied to this member's store.

The log is DLedger's layout in `<store>/dledger/` (FileLog); the term and vote in its `currterm`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferrymq.ha.dledger import command, hardstate
from ferrymq.ha.dledger.apply import AppliedMark, StoreApplier
from ferrymq.ha.dledger.commitlog_log import CommitLogRaftLog
from ferrymq.ha.dledger.entry import MAGIC_NORMAL
from ferrymq.ha.dledger.filelog import SEGMENT_BYTES, FileLog
from ferrymq.ha.dledger.log import Entry
from ferrymq.ha.dledger.messages import Message
from ferrymq.ha.dledger.pending import PendingAppends
from ferrymq.ha.dledger.raft import NotLeader, RaftConfig, RaftNode, Role
from ferrymq.ha.dledger.retention import LogRetention
from ferrymq.ha.dledger.transport import PeerTransport
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.net.tls import ServerTLS
from ferrymq.store import PutResult, PutStatus

log = logging.getLogger(__name__)

APPLY_BATCH = 1024  # entries read from the log at a time while applying
APPLY_BYTES = 8 << 20
BACKGROUND_SYNC = 1.0  # s between fsyncs of the log when sends do not wait for them


@dataclass(frozen=True)
class NodeSettings:
    self_id: str
    peers: dict[str, tuple[str, int]]
    root: Path
    tick_ms: int = 100
    raft: RaftConfig = field(default_factory=RaftConfig)
    sync_log: bool = False  # fsync the log before answering (the store's SYNC_FLUSH)
    segment_bytes: int = SEGMENT_BYTES  # the Raft log's segments (the broker uses the CommitLog's)
    server_tls: ServerTLS | None = None  # the Raft port's TLS
    client_tls: ssl.SSLContext | None = None  # to dial the other members with


class CommandLog(FileLog):
    """The two files' Raft log: it refuses an entry received whose body is no put command (a run of
    CommitLog records from a leader on the single log) rather than hold what its apply cannot."""

    def append(self, entries: Sequence[Entry]) -> None:
        for k, e in enumerate(entries):
            if e.magic == MAGIC_NORMAL and not command.starts_as_command(e.body):
                super().append(entries[:k])
                why = f"no put command: {command.OTHER_LAYOUT % ('the single log', 'the two files')}"
                raise self._refuse(e.index, why)
        super().append(entries)


def _expire(fut: asyncio.Future) -> None:
    """A put not settled in time: its outcome is unknown (it may still commit), the producer retries."""
    if not fut.done():
        fut.set_result(PutResult(PutStatus.FLUSH_SLAVE_TIMEOUT, "not committed by a majority in time"))


class DLedgerNode:
    def __init__(
        self, settings: NodeSettings, applier: StoreApplier, leader_changed: Callable[[bool], None]
    ) -> None:
        """`leader_changed(is_leader)`: this member became the leader, or stopped being it."""
        self.settings = settings
        self.applier = applier
        self._leader_changed = leader_changed
        settings.root.mkdir(parents=True, exist_ok=True)
        self.log = self._open_log()
        self.raft = RaftNode(
            settings.self_id, list(settings.peers), self.log, hardstate.load(settings.root),
            random.Random(), settings.raft,
        )  # fmt: skip
        self.applied = self._recover_applied()
        store = applier.store
        self.retention = LogRetention(
            self.log, store.config, store.disk_usage_ratio, self.raft.stranded, settings.self_id,
            on_hours=isinstance(self.log, CommitLogRaftLog),
        )  # fmt: skip
        self.transport = PeerTransport(
            settings.self_id, settings.peers, self._received, server_tls=settings.server_tls,
            client_tls=settings.client_tls,
        )  # fmt: skip
        self.pending: PendingAppends[tuple[int, asyncio.Future]] = PendingAppends()
        self._proposals: list[tuple[bytes | memoryview, Any, asyncio.Future]] = []
        self._proposed: dict[int, tuple[int, Any]] = {}  # index: (term, what `_proposal` kept) proposed here
        self._scheduled = False
        self._tasks = BackgroundTasks(f"DLedger {settings.self_id}")
        self.is_leader = False  # the Raft leader, and every entry of earlier terms applied here
        self._elected_at: tuple[int, int] | None = None  # (term, NOOP index) of the term it leads

    def _open_log(self) -> FileLog | CommitLogRaftLog:
        """The Raft log (FileLog) and the applied mark beside it."""
        self.mark = AppliedMark(self.settings.root, self.applier.end)
        self._unsaved: deque[tuple[int, int]] = deque()  # (index, CommitLog end after it) not yet marked
        return CommandLog(self.settings.root, self.settings.segment_bytes)

    def _recover_applied(self) -> int:
        """The last entry whose put is in the store: the mark's, then each later entry whose records
        follow (apply.py). An entry whose put the store refused left none: the next entry's records
        stand where its would have."""
        applied, offset = self.mark.index, self.mark.offset
        applier = self.applier
        for entry in self._entries(applied + 1, self.log.last_index):
            if not applier.has_record_at(offset):
                break
            c = self._put_of(entry)
            end = None if c is None else applier.records_end(c, offset)
            if end is not None:
                applied, offset = entry.index, end
        self._unsaved.append((applied, offset))
        return min(applied, self.log.last_index)

    def _entries(self, start: int, stop: int) -> Iterator[Entry]:
        """The log's entries `start` .. `stop`, read in runs."""
        while start <= stop:
            run = self.log.read(start, min(APPLY_BATCH, stop - start + 1), APPLY_BYTES)
            if not run:  # never spin: the log must hold what was committed and not yet applied
                held = f"{self.log.first_index}..{self.log.last_index}"
                raise IndexError(f"no entry {start} in the log ({held})")
            yield from run
            start += len(run)

    def _put_of(self, entry: Entry) -> command.PutCommand | None:
        """The put an entry carries (None for a NOOP, or a body that is not one)."""
        if entry.magic != MAGIC_NORMAL:
            return None
        try:
            return command.decode(entry.body)
        except command.CommandError as e:
            log.error("DLedger %s: entry %d is not a put: %s", self.settings.self_id, entry.index, e)
            return None

    async def start(self) -> None:
        await self.transport.start()
        self._tasks.spawn(self._tick(), "DLedger clock")
        self._tasks.spawn(self._sync_in_background(), "DLedger log sync and applied mark")

    async def close(self) -> None:
        await self._tasks.close()
        await self.transport.close()
        for _, fut in self.pending.drop_all():
            if not fut.done():
                fut.set_result(PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "broker stopping"))
        self.log.sync()
        self._close_log()

    def _close_log(self) -> None:
        """The log synced: the mark saved up to its end, both closed."""
        self._save_mark(self.log.last_index)
        self.log.close()
        self.mark.close()

    @property
    def leader_id(self) -> str | None:
        return self.raft.leader_id

    async def put(self, c: command.PutCommand, timeout: float) -> PutResult:
        """Propose `c`; its store result once committed and applied here, or why not."""
        if not self.is_leader:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, f"not the DLedger leader ({self.leader_id})")
        proposal = self._proposal(c)
        if isinstance(proposal, PutResult):
            return proposal
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._proposals.append((*proposal, fut))
        self._schedule()
        expiry = loop.call_later(timeout, _expire, fut)  # cheaper than wait_for, which makes a task
        try:
            return await fut
        finally:
            expiry.cancel()

    def _proposal(self, c: command.PutCommand) -> tuple[bytes | memoryview, Any] | PutResult:
        """The entry body proposed for `c`, and what `_apply` gets back for it when it commits (or
        why it cannot be proposed)."""
        return b"".join(command.encode(c)), c

    # -- driving the core ---------------------------------------------------------------------

    def _received(self, m: Message) -> None:
        self.raft.step(m)
        self._schedule()

    async def _tick(self) -> None:
        period = self.settings.tick_ms / 1000
        while True:
            await asyncio.sleep(period)
            self.raft.tick()
            self._schedule()

    async def _sync_in_background(self) -> None:
        """Every second: the log fsynced (unless each Ready does it), the applied mark moved up to
        what the CommitLog has flushed, then the log's retention."""
        while True:
            await asyncio.sleep(BACKGROUND_SYNC)
            synced = self.log.last_index  # what the sync below covers; with sync_log, all of it
            if not self.settings.sync_log:
                await asyncio.to_thread(self.log.sync)
            self.after_flush(synced)

    def after_flush(self, log_synced: int) -> None:
        """The applied mark moved up to what the CommitLog has flushed (and the log holds durably up
        to `log_synced`), then the log's retention."""
        if self._save_mark(log_synced):
            self.retention.run(self.mark.index)

    def _save_mark(self, log_synced: int) -> bool:
        """Mark the last entry whose records the CommitLog has flushed and which the log holds
        durably (a mark past the log's durable end would skip entries re-fetched after a power
        loss); whether the mark moved."""
        flushed, last = self.applier.flushed, None
        unsaved = self._unsaved
        while unsaved and unsaved[0][1] <= flushed and unsaved[0][0] <= log_synced:
            last = unsaved.popleft()
        if last is None or last[0] <= self.mark.index:
            return False
        self.mark.save(*last)
        return True

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        if self._proposals:
            self._propose()
        raft = self.raft
        while raft.has_ready():
            rd = raft.ready()
            if rd.hard_state is not None:
                hardstate.save(self.settings.root, rd.hard_state)
            if rd.unsynced_from is not None and self.settings.sync_log:
                self.log.sync()
            self.transport.send(rd.messages)
            if rd.commit is not None:
                self._apply(rd.commit)
            if rd.soft_state is not None:
                if rd.soft_state.role is not Role.LEADER:
                    self._elected_at = None
                elif self._elected_at is None or self._elected_at[0] != rd.soft_state.term:
                    if self.is_leader:  # led again in a new term: others may have led between
                        self._lead(False)
                    self._elected_at = (rd.soft_state.term, self.log.last_index)  # its NOOP
            leads = self._elected_at is not None and self.applied >= self._elected_at[1]
            if leads != self.is_leader:
                self._lead(leads)

    def _lead(self, leads: bool) -> None:
        """Serve as the leader only once this member's store holds every earlier term's entry (its
        NOOP applied), so the broker's services, rebuilt from the store then, see all of them."""
        self.is_leader = leads
        log.info(
            "DLedger %s: %s in term %d", self.settings.self_id, "leader" if leads else "no longer leader",
            self.raft.term,
        )  # fmt: skip
        self._leader_changed(leads)

    def _propose(self) -> None:
        proposals, self._proposals = self._proposals, []
        try:
            first = self.raft.propose([body for body, _, _ in proposals])
        except NotLeader as e:
            self._refused()
            for _, _, fut in proposals:
                fut.set_result(PutResult(PutStatus.SERVICE_NOT_AVAILABLE, str(e)))
            return
        term = self.raft.term
        proposed = self._proposed
        for k, (_, c, fut) in enumerate(proposals):
            self.pending.add(first + k, term, (first + k, fut))
            proposed[first + k] = (term, c)

    def _refused(self) -> None:
        """Proposals the core refused (no longer the leader): nothing to undo here."""

    def _apply(self, commit: int) -> None:
        """Store the committed entries not yet stored; answer the puts they settle."""
        results: dict[int, PutResult] = {}
        applier, unsaved = self.applier, self._unsaved
        proposed = self._proposed
        for entry in self._entries(self.applied + 1, commit):
            own = proposed.pop(entry.index, None)  # the leader's own put: no need to decode it again
            c = own[1] if own is not None and own[0] == entry.term else self._put_of(entry)
            if c is not None:
                results[entry.index] = applier.apply(c)
                unsaved.append((entry.index, applier.end))
            self.applied = entry.index
        acked, replaced = self.pending.settle(commit, self.log.term_at)
        for index, fut in acked:
            if not fut.done():
                fut.set_result(
                    results.get(index) or PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "not applied")
                )
        for _, fut in replaced:
            if not fut.done():
                fut.set_result(PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "replaced by a new DLedger leader"))
