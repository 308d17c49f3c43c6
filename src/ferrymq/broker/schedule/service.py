"""What the delay-level and timer services share: a loop that sleeps until the next message is due
(or a new one arrives), progress saved only once its redeliveries are on disk, and the messages a
slave acting for its master left undecided (intents.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from ferrymq.broker.schedule.delivered import delivered_since
from ferrymq.broker.schedule.intents import no_intent
from ferrymq.broker.schedule.redeliver import redelivery
from ferrymq.ha.dledger.command import PutCommand
from ferrymq.protocol.record import BLANK, read_record_meta
from ferrymq.store import MessageStore, PutResult, PutStatus

Escape = Callable[[memoryview | None, tuple[bytes, ...], bytes], Awaitable[PutResult]]
"""`redeliver` elsewhere: (record, properties to drop, properties to add) → the put's result."""

log = logging.getLogger(__name__)

_INACTIVE_RECHECK_MS = 1000


class DueService:
    """Subclasses implement `step()`: redeliver what is due, return when the next is due (ms) or None."""

    def __init__(
        self,
        store: MessageStore,
        put: Callable[[PutCommand], Awaitable[PutResult]],
        written: Callable[[], None],
    ) -> None:
        """`put`: the broker's writer (in DLedger mode a redelivery goes through Raft)."""
        self.store = store
        self._put = put
        self.progress = DurableProgress(store, self._save)
        self.stopping = False
        self._written = written  # tells the broker a put happened (dispatch, wake pulls)
        self._wake = asyncio.Event()
        # Whether redeliveries may be written now: the owner sets its own test (a slave writes none).
        self.active: Callable[[], bool] = lambda: True
        # Where redeliveries go instead of this broker's log: a slave acting for its missing master
        # sends them to another master (the escape bridge); None: here.
        self.escape: Callable[[], Escape | None] = lambda: None
        # Said before this broker stores deliveries in its own log (CommitLog offsets of the
        # held-back records): False means not now. A master whose slave may act for it waits for
        # the slave to have the intent (intents.py).
        self.intend: Callable[[list[int]], Awaitable[bool]] = no_intent
        # CommitLog offsets of held-back messages its master may or may not have delivered (an intent
        # and no delivery in a slave's copy of the log): a slave acting for it leaves them to the
        # master, whose log knows; kept in the progress, and handed back with it.
        self.held: set[int] = set()
        # ms until which a slave acting for its master leaves `held` alone; then it delivers them, at
        # least once (the master may be gone for good): set when it starts acting (None: not set)
        self.held_until: int | None = None
        self.stepping = False  # inside a step: a handback waits for it to end
        # The progress as loaded or adopted counts every redelivery stored before `log_offset`
        # (-1: unknown, as in files written before there was one); the first step after it counts
        # the later ones from the log (delivered.py).
        self.log_offset = -1
        self._recount = True
        self._step_from = 0  # where the CommitLog ended when the current (or last) step began

    async def step(self) -> int | None:
        raise NotImplementedError

    def log_mark(self) -> int:
        """The CommitLog offset from which redeliveries the progress does not count yet may be stored.
        While this broker writes its own redeliveries: where the step now running (or the last one)
        began. Otherwise — a slave, a master before it took its duties back, a slave acting for its
        master (whose redeliveries go to other masters) — the one of the progress loaded or adopted."""
        if self._recount or not self.active() or self.escape() is not None:
            return self.log_offset
        return self._step_from if self.stepping else self.store.commitlog.max_offset

    def _took_over(self, log_offset: int) -> None:
        """A progress was loaded or adopted: count the redeliveries after it before the next step."""
        self.log_offset = log_offset
        self._recount = True

    async def _recounted(self, topic: str) -> dict[int, set[int]]:
        """Once after a load or adoption: the held-back messages of `topic` the log shows redelivered
        past the progress (queue id → queue offsets); a slave acting for its master also holds the
        undecided ones. Read on a worker thread: seconds of traffic may take a second to walk, and
        pulls are served meanwhile."""
        self._recount = False
        if self.log_offset < 0:
            return {}
        recount = await asyncio.to_thread(delivered_since, self.store, self.log_offset, topic)
        if self.escape() is not None:
            self.held |= recount.undecided
        return recount.delivered

    def _adopt_held(self, held: list[int], handed_back: bool) -> None:
        """A progress adopted: a slave's copy of its master's replaces what it held (the master has
        settled them since); a handback adds to what this master still holds."""
        self.held = self.held | set(held) if handed_back else set(held)

    async def _settle_held(self, delivered: dict[int, set[int]]) -> bool:
        """Delivering to this log (a master that took the duties back, a promoted slave): deliver the
        messages an acting slave held, except those `delivered` (by the recount) shows this log has.
        Acting for the master: deliver them once the master stayed away `held_until`. False if a put
        failed (the rest stay held, for the next step)."""
        if not self.held:
            return True
        escape = self.escape()
        if escape is not None:
            return await self._release_held(escape)
        todo = []
        for origin in sorted(self.held):
            record = self.store.look_message_by_offset(origin)
            meta = read_record_meta(record, 0, len(record)) if record is not None else None
            if (
                meta is None
                or meta is BLANK
                or meta.queue_offset in delivered.get(meta.queue_id, ())
                or not self._passed(meta.queue_id, meta.queue_offset)  # delivered in turn
            ):
                self.held.discard(origin)
            else:
                todo.append((origin, record))
        if todo and not await self.intend([origin for origin, _ in todo]):
            return False
        for origin, record in todo:
            result = await self._deliver_here(record, origin)
            if result.status is PutStatus.PUT_OK:
                self._written()
            elif result.status is not PutStatus.MESSAGE_ILLEGAL:
                return False
            self.held.discard(origin)
        return True

    async def _release_held(self, escape: Escape) -> bool:
        """Acting for a master still away at `held_until`: escape what it held (at least once)."""
        if self.held_until is None or now_ms() < self.held_until:
            return True
        log.warning("%d scheduled messages the master may have delivered: it is still away, this slave "
                    "delivers them (at least once)", len(self.held))  # fmt: skip
        for origin in sorted(self.held):
            result = await self._escape(escape, self.store.look_message_by_offset(origin))
            if result.status is not PutStatus.PUT_OK and result.status is not PutStatus.MESSAGE_ILLEGAL:
                return False
            self.held.discard(origin)
        return True

    def _held_due(self, due: int | None) -> int | None:
        """`due`, or earlier when an acting slave's held messages are released first."""
        if not self.held or self.escape() is None or self.held_until is None:
            return due
        return self.held_until if due is None else min(due, self.held_until)

    def _passed(self, queue_id: int, queue_offset: int) -> bool:
        """Whether the progress is past a held-back message (so it is delivered only if held)."""
        raise NotImplementedError

    async def _deliver_here(self, record: memoryview | None, origin: int) -> PutResult:
        """Redeliver the held-back message at CommitLog `origin` to this log, naming it."""
        raise NotImplementedError

    async def _escape(self, escape: Escape, record: memoryview | None) -> PutResult:
        """Redeliver the held-back `record` elsewhere (acting for the master)."""
        raise NotImplementedError

    async def _redeliver(
        self, record: memoryview | None, drop: Iterable[bytes], add: bytes = b""
    ) -> PutResult:
        """Store `record` again under its real topic (see redeliver.redelivery)."""
        c = redelivery(record, drop, add)
        if isinstance(c, str):
            return PutResult(PutStatus.MESSAGE_ILLEGAL, c)
        return await self._put(c)

    def _save(self, snapshot) -> None:
        raise NotImplementedError

    def arrived(self) -> None:
        """A new message to hold back was dispatched, or the service should stop (event loop only)."""
        self._wake.set()

    async def run(self) -> None:
        while not self.stopping:
            self._wake.clear()
            if self.active():
                self._step_from = self.store.commitlog.max_offset
                self.stepping = True
                try:
                    next_due = await self.step()
                finally:
                    self.stepping = False
            else:
                next_due = now_ms() + _INACTIVE_RECHECK_MS
            delay = None if next_due is None else (next_due - now_ms()) / 1000
            if delay is not None and delay <= 0:
                continue
            try:
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def stop(self) -> None:
        """After the CommitLog is flushed for good: save where the service got to."""
        self.progress.save_now()


class DurableProgress:
    """Saves a service's progress only once the messages it redelivered are flushed to disk, so a
    crash at any moment redelivers (at least once) rather than loses: `note` a snapshot after a
    round, `save_if_flushed` from a periodic task, `save_now` at a clean stop."""

    def __init__(self, store: MessageStore, save: Callable[[object], None]) -> None:
        self.store = store
        self._save = save
        self._waiting: tuple[object, int] | None = None  # (snapshot, CommitLog offset it needs flushed)
        self._latest: object | None = None
        self._saved: object | None = None

    def note(self, snapshot: object) -> None:
        self._latest = snapshot

    def save_if_flushed(self) -> None:
        if self._waiting is not None and self.store.commitlog.flushed_offset >= self._waiting[1]:
            self._write(self._waiting[0])
            self._waiting = None
        if self._waiting is None and self._latest is not None and self._latest != self._saved:
            self._waiting = (self._latest, self.store.commitlog.max_offset)

    def save_now(self) -> None:
        if self._latest is not None and self._latest != self._saved:
            self._write(self._latest)

    def _write(self, snapshot: object) -> None:
        self._save(snapshot)
        self._saved = snapshot


def now_ms() -> int:
    return time.time_ns() // 1_000_000
