"""A running job's progress, from Spark's status tracker: the stages running and their tasks done.

Spark's own console progress bar draws over itself on a terminal and is noise in a log; this
prints a line when a stage's count of finished tasks changes, at most every `interval` seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession


def stage_lines(spark: SparkSession, seen: dict[int, tuple[int, int]]) -> list[str]:
    """A line for each active stage whose progress differs from `seen` (updated in place)."""
    tracker = spark.sparkContext.statusTracker()
    lines = []
    for stage_id in sorted(tracker.getActiveStageIds()):
        info = tracker.getStageInfo(stage_id)
        if info is None:  # finished between the two calls
            continue
        state = (info.numCompletedTasks, info.numActiveTasks)
        if seen.get(stage_id) == state:
            continue
        seen[stage_id] = state
        failed = f", {info.numFailedTasks} failed" if info.numFailedTasks else ""
        lines.append(
            f"stage {stage_id} ({info.name.split(' at ')[0]}): {info.numCompletedTasks}/{info.numTasks} "
            f"tasks done, {info.numActiveTasks} running{failed}"
        )
    return lines


@contextmanager
def reporting(spark: SparkSession, echo: Callable[[str], None], interval: float = 2.0) -> Iterator[None]:
    """Echo stage progress from a thread of its own while the body runs Spark jobs."""
    done = threading.Event()
    seen: dict[int, tuple[int, int]] = {}

    def report() -> None:
        while not done.wait(interval):
            try:
                lines = stage_lines(spark, seen)
            except Exception:  # the session is stopping: progress is not worth an error
                return
            for line in lines:
                echo(line)

    thread = threading.Thread(target=report, name="ferrymq-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
