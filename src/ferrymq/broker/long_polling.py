"""Long polling: pulls that find nothing wait here until a message arrives or they time out.

The store's dispatcher thread reports which queues got entries; `notify` (run on the event loop)
wakes exactly the waiters of those queues, so an idle poll costs nothing until then. Listeners
(a front serving many queues in the broker's process) hear of every arrival, so that they pop only
queues with something new rather than park a long poll per queue.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

Arrivals = Callable[[list[tuple[str, int]]], None]


class PullHoldService:
    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], list[asyncio.Future[None]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._listeners: list[Arrivals] = []

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called on `loop`'s thread."""
        self._loop = loop
        self._loop_thread = threading.get_ident()

    async def wait(self, topic: str, queue_id: int, timeout: float, still_empty) -> None:
        """Wait up to `timeout` s for new entries in the queue; `still_empty()` closes the race
        between the caller's empty read and this registration."""
        await self.wait_any([(topic, queue_id)], timeout, still_empty)

    async def wait_any(self, queues: list[tuple[str, int]], timeout: float, still_empty) -> None:
        """Wait up to `timeout` s for new entries in any of `queues` (one future for all of them:
        no task per queue); `still_empty()` closes the race as in `wait`."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        for key in queues:
            self._waiters.setdefault(key, []).append(future)
        timer = None
        try:
            if still_empty():  # (wait_for would take a loop turn more to wake)
                timer = loop.call_later(timeout, _settle, future)
                await future
        finally:
            if timer is not None:
                timer.cancel()
            for key in queues:
                waiters = self._waiters.get(key)
                if waiters and future in waiters:
                    waiters.remove(future)
                    if not waiters:
                        del self._waiters[key]

    def listen(self, listener: Arrivals) -> Callable[[], None]:
        """Call `listener` (on the event loop) with every report of queues with new entries; returns
        the call that stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def arrived(self, queues: list[tuple[str, int]]) -> None:
        """Thread-safe: called by the dispatcher with the queues that got new entries. On the event
        loop (a broker dispatching there) the waiters wake at once, not a loop turn later."""
        loop = self._loop
        if loop is not None and (
            self._listeners or (self._waiters and any(q in self._waiters for q in queues))
        ):
            if threading.get_ident() == self._loop_thread:
                self._notify(queues)
            else:
                loop.call_soon_threadsafe(self._notify, queues)

    def _notify(self, queues: list[tuple[str, int]]) -> None:
        for listener in list(self._listeners):
            listener(queues)
        for key in queues:
            for future in self._waiters.pop(key, ()):
                if not future.done():
                    future.set_result(None)

    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    def wake_all(self) -> None:
        """At shutdown: answer every held pull now."""
        self._notify(list(self._waiters))


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
