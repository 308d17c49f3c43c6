"""The broker's side of scheduled messages: diverting puts, and running both services."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ferrymq.broker.schedule.delay import DelayLevelService
from ferrymq.broker.schedule.divert import TIMER_TOPIC, ScheduleError, divert
from ferrymq.broker.schedule.service import Escape, now_ms
from ferrymq.broker.schedule.timer import TimerService
from ferrymq.broker.topics import PERM_READ, PERM_WRITE, TopicConfigManager
from ferrymq.ha.dledger.command import PutCommand
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.protocol.topic_names import SCHEDULE_TOPIC
from ferrymq.store import MessageStore, PutResult, StoreConfig

log = logging.getLogger(__name__)

PERSIST_INTERVAL = 0.5  # s between progress saves (each waits for its redeliveries to be flushed)
STOP_GRACE = 5.0  # s a stopping service may take to finish the round it is in


class Scheduler:
    def __init__(
        self, store_config: StoreConfig, store: MessageStore, topics: TopicConfigManager, *,
        put: Callable[[PutCommand], Awaitable[PutResult]], written: Callable[[], None],
        active: Callable[[], bool],
    ) -> None:  # fmt: skip
        """`put`: how a due message is stored again (the broker's writer); `written`: after every
        redelivery put; `active()`: whether this broker delivers due messages now (the master; a
        slave's log is its master's copy)."""
        self.store = store
        config_dir = store_config.config_dir
        levels, precision = store_config.message_delay_level, store_config.timer_precision_ms
        self.delays = DelayLevelService(self.store, config_dir, levels, put, written)
        self.timer = TimerService(self.store, config_dir, precision, put, written)
        for service in (self.delays, self.timer):
            service.active = active
        self._timer_enabled = store_config.timer_wheel_enable
        self._max_delay_sec = store_config.timer_max_delay_sec
        self._precision = store_config.timer_precision_ms
        topics.ensure(SCHEDULE_TOPIC, self.delays.max_level, PERM_READ | PERM_WRITE)
        topics.ensure(TIMER_TOPIC, 1, PERM_READ | PERM_WRITE)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks = BackgroundTasks("scheduler")
        self._runs: list[asyncio.Task] = []

    def divert(self, props: bytes, topic: str, queue_id: int, sys_flag: int) -> tuple[str, int, bytes] | None:
        """Where a message is stored until due (see divert.divert); raises ScheduleError."""
        now = now_ms()
        levels = self.delays.max_level
        diverted = divert(props, topic, queue_id, sys_flag, now, levels, self._max_delay_sec, self._precision)
        if diverted is not None and diverted[0] == TIMER_TOPIC and not self._timer_enabled:
            raise ScheduleError("delivery-time messages are refused: timer_wheel_enable is false")
        return diverted

    def escape_by(self, escape: Callable[[], Escape | None]) -> None:
        """Where both services put due messages: `escape()` when it names a bridge, else this log."""
        self.delays.escape = self.timer.escape = escape

    def intend_by(self, intend: Callable[[list[int]], Awaitable[bool]]) -> None:
        """What both services say before storing deliveries in this log (see intents.py)."""
        self.delays.intend = self.timer.intend = intend

    def acting_started(self, undecided_timeout_ms: int) -> None:
        """This slave acts for its master from now on: it leaves to the master the messages the
        master may have delivered (DueService.held) for `undecided_timeout_ms`."""
        for service in (self.delays, self.timer):
            service.held_until = now_ms() + undecided_timeout_ms

    def wake(self) -> None:
        """Look again at once (whether this broker delivers has changed)."""
        self.delays.arrived()
        self.timer.arrived()

    def runtime_info(self) -> dict[str, str]:
        """RocketMQ's scheduleMessageOffset_<level> ("delivered,stored") and the timer's backlog."""
        info = {}
        for level in range(1, self.delays.max_level + 1):
            stored = self.store.get_max_offset(SCHEDULE_TOPIC, level - 1)
            info[f"scheduleMessageOffset_{level}"] = f"{self.delays.offsets.get(level, 0)},{stored}"
        info["timerPendingMessages"] = str(self.timer.pending)
        return info

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._runs = [
            self._tasks.spawn(service.run(), name)
            for name, service in (("delay levels", self.delays), ("timer", self.timer))
        ]
        self._tasks.spawn(self._persist_loop(), "scheduled-message progress")

    def arrived(self, queues: list[tuple[str, int]]) -> None:
        """Thread-safe: the dispatcher's report of queues with new entries."""
        loop = self._loop
        if loop is None:
            return
        for topic, _ in queues:
            if topic == SCHEDULE_TOPIC:
                loop.call_soon_threadsafe(self.delays.arrived)
            elif topic == TIMER_TOPIC:
                loop.call_soon_threadsafe(self.timer.arrived)

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(PERSIST_INTERVAL)
            for service in (self.delays, self.timer):
                try:
                    service.progress.save_if_flushed()
                except Exception:
                    log.exception("saving scheduled-message progress failed")

    async def stop(self) -> None:
        """Let the services finish the round they are in, then stop them."""
        for service in (self.delays, self.timer):
            service.stopping = True
            service.arrived()
        if self._runs:
            await asyncio.wait(self._runs, timeout=STOP_GRACE)
        await self._tasks.close()

    def save(self) -> None:
        """After the store flushed and closed: record where both services got to."""
        self.delays.stop()
        self.timer.stop()
