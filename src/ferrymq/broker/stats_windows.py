"""Per-topic and per-group message counts over the last minute, hour and day, as RocketMQ's
BrokerStatsManager keeps them and VIEW_BROKER_STATS_DATA answers them (rocketmq-exporter reads
TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, GROUP_GET_NUMS, GROUP_GET_SIZE, BROKER_PUT_NUMS, BROKER_GET_NUMS).

The counts are the put and delivery tallies the broker keeps anyway; this samples them every 10 s
(kept for a minute), every 10 minutes (kept for an hour) and every 4 hours (kept for a day), and
answers each window's sum as the difference between now and the oldest sample in it. Only keys
with traffic are in a tally, so an idle broker's samples are empty."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

Counts = dict[str, dict[str, int]]
"""stats name → stats key → count so far"""

WINDOWS = (("statsMinute", 60, 10), ("statsHour", 3600, 600), ("statsDay", 86400, 14400))
"""(field, window seconds, sampling period seconds)"""


@dataclass(frozen=True, slots=True)
class WindowFigures:
    sum: int
    tps: float


class StatsWindows:
    def __init__(self, counts: Callable[[], Counts], clock: Callable[[], float] = time.monotonic) -> None:
        """`counts()`: the counts so far; `tick()` is called every 10 s."""
        self._counts = counts
        self._clock = clock
        self._samples = {name: deque[tuple[float, Counts]](maxlen=window // period + 1)
                         for name, window, period in WINDOWS}  # fmt: skip
        self._last = dict.fromkeys(self._samples, float("-inf"))

    def tick(self) -> None:
        now, counts = self._clock(), None
        for name, _, period in WINDOWS:
            if now - self._last[name] >= period - 0.5:
                counts = counts if counts is not None else self._counts()
                self._samples[name].append((now, counts))
                self._last[name] = now

    def figures(self, stats_name: str, stats_key: str) -> dict[str, WindowFigures] | None:
        """Each window's sum and rate for the key; None if the broker has no such stats."""
        counts = self._counts().get(stats_name)
        if counts is None or stats_key not in counts:
            return None
        now, current = self._clock(), counts[stats_key]
        answer = {}
        for name, window, _ in WINDOWS:
            oldest = next(((t, c) for t, c in self._samples[name] if now - t <= window + 1), None)
            if oldest is None or now <= oldest[0]:
                answer[name] = WindowFigures(0, 0.0)
                continue
            total = current - oldest[1].get(stats_name, {}).get(stats_key, 0)
            answer[name] = WindowFigures(total, total / max(now - oldest[0], 1.0))
        return answer
