"""Small asyncio waits the client's loops share: bounded waits on events, ending a set of tasks,
and tasks whose failure belongs to whoever awaits them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")


async def wait_event(event: asyncio.Event, timeout: float) -> None:
    """Wait for `event` at most `timeout` s; callers check their condition again either way."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass


async def finish(tasks: Iterable[asyncio.Task], timeout: float) -> bool:
    """Let tasks end within `timeout` s, then cancel the rest and wait until they have unwound;
    True when all of them ended on their own."""
    tasks = list(tasks)
    if not tasks:
        return True
    _, pending = await asyncio.wait(tasks, timeout=timeout) if timeout > 0 else (set(), set(tasks))
    pending = {task for task in pending if not task.done()}
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)
    return not pending


async def outcome(awaitable: Awaitable[T]) -> T | Exception:
    """Its result, or the exception it raised: for a task of a task group whose failure is its
    awaiter's to handle (and report), not the group's to log as a bug."""
    try:
        return await awaitable
    except Exception as e:
        return e
