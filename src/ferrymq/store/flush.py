"""Background housekeeping: periodic CommitLog flushes (ASYNC_FLUSH), checkpoints, retention.

SYNC_FLUSH's group commit is store/group_commit.py."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class FlushService:
    """One housekeeping thread running the store's periodic jobs: async CommitLog flushes,
    checkpoints, retention and disk checks. It knows only the jobs and their periods, so a job's
    failure is logged and retried at its next turn without stopping the others."""

    def __init__(self, jobs: dict[str, tuple[float | None, Callable[[], object]]]) -> None:
        """`jobs`: name -> (period in seconds, or None to skip it; the call)."""
        self.jobs = {name: (period, call) for name, (period, call) in jobs.items() if period}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ferrymq-flush", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        now = time.monotonic()
        due = {name: now + period for name, (period, _) in self.jobs.items()}
        while due and not self._stop.wait(max(0.0, min(due.values()) - time.monotonic())):
            now = time.monotonic()
            for name in [n for n, t in due.items() if t <= now]:
                period, job = self.jobs[name]
                due[name] = now + period
                try:
                    job()
                except Exception:
                    log.exception("store %s task failed; will retry", name)
