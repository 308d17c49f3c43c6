import asyncio
import logging

import pytest

from ferrymq.net.tasks import BackgroundTasks


async def test_close_cancels_and_awaits_running_tasks():
    tasks = BackgroundTasks("owner")
    cleaned = asyncio.Event()

    async def forever():
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    task = tasks.spawn(forever(), name="forever")
    await asyncio.sleep(0)
    assert len(tasks) == 1
    await tasks.close()
    assert task.cancelled() and cleaned.is_set() and len(tasks) == 0


async def test_a_failure_is_logged_when_it_happens(caplog):
    tasks = BackgroundTasks("owner")

    async def boom():
        raise ValueError("broken")

    with caplog.at_level(logging.ERROR, logger="ferrymq.net.tasks"):
        task = tasks.spawn(boom(), name="boom")
        await asyncio.wait([task])
        await asyncio.sleep(0)
    assert any("owner: task boom failed" in r.getMessage() and r.exc_info for r in caplog.records)
    assert len(tasks) == 0
    await tasks.close()


async def test_no_task_starts_after_close():
    tasks = BackgroundTasks("owner")
    await tasks.close()

    async def never():
        raise AssertionError("must not run")

    with pytest.raises(RuntimeError, match="owner is stopped"):
        tasks.spawn(never())
