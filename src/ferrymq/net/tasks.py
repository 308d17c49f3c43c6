"""The background tasks of one server or client, owned in one place.

A task started with ``asyncio.create_task`` and forgotten can die silently, outlive its owner or be
garbage-collected mid-flight. Every server and client keeps its tasks in a ``BackgroundTasks``
instead: each failure is logged when it happens, and ``close`` cancels and awaits whatever is left.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class BackgroundTasks:
    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._tasks: set[asyncio.Task] = set()
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task:
        """Run ``coro`` as a task of this owner; it is cancelled by ``close`` if still running."""
        if self._closed:
            coro.close()
            raise RuntimeError(f"{self.owner} is stopped: it starts no more tasks")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("%s: task %s failed", self.owner, task.get_name(), exc_info=error)

    @property
    def closed(self) -> bool:
        """Once ``close`` began: ``spawn`` refuses new tasks."""
        return self._closed

    def __len__(self) -> int:
        return len(self._tasks)

    async def close(self) -> None:
        """Start no more tasks; cancel the running ones and wait until each has ended."""
        self._closed = True
        while self._tasks:
            pending = list(self._tasks)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
