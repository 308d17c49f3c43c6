"""Message rates as RocketMQ's StoreStatsService reports them: totals sampled once a second, and
rates over the last 10, 60 and 600 seconds ("putTps": "12.00 10.50 9.98"), plus the totals at the
start of today and of yesterday (msgPutTotalTodayMorning, ...), as rocketmq-exporter and
rocketmq-dashboard read them from GET_BROKER_RUNTIME_INFO."""

from __future__ import annotations

import datetime
import shutil
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

WINDOWS = (10, 60, 600)  # seconds, RocketMQ's


@dataclass(frozen=True, slots=True)
class Totals:
    """Counts since the broker started."""

    put: int = 0  # messages stored
    got: int = 0  # messages delivered (pull and pop)
    found: int = 0  # reads that found messages
    missed: int = 0  # reads that found none


class RuntimeStats:
    def __init__(
        self, totals: Callable[[], Totals], clock: Callable[[], float] = time.monotonic,
        today: Callable[[], datetime.date] = datetime.date.today,
    ) -> None:  # fmt: skip
        """`totals` reads the current counts; `sample` is called once a second."""
        self._totals = totals
        self._clock = clock
        self._today = today
        self._samples: deque[tuple[float, Totals]] = deque(maxlen=WINDOWS[-1] + 1)
        self._day = today()
        self.today_morning = Totals()  # totals when today began (zero if the broker started today)
        self.yesterday_morning = Totals()

    def sample(self) -> None:
        totals = self._totals()
        self._samples.append((self._clock(), totals))
        day = self._today()
        if day != self._day:
            self._day, self.yesterday_morning, self.today_morning = day, self.today_morning, totals

    def rates(self, pick: Callable[[Totals], float]) -> str:
        """``"<10 s> <60 s> <600 s>"`` per second; a window not yet full is measured over what there is."""
        now, current = self._clock(), self._totals()
        parts = []
        for window in WINDOWS:
            since = next(((t, s) for t, s in self._samples if now - t <= window + 0.5), None)
            if since is None or now - since[0] <= 0:
                parts.append("0.00")
            else:
                parts.append(f"{(pick(current) - pick(since[1])) / (now - since[0]):.2f}")
        return " ".join(parts)

    def info(self) -> dict[str, str]:
        """The runtime-info entries this owns."""
        now = self._totals()
        return {
            "putTps": self.rates(lambda t: t.put),
            "getTransferedTps": self.rates(lambda t: t.got),
            "getFoundTps": self.rates(lambda t: t.found),
            "getMissTps": self.rates(lambda t: t.missed),
            "getTotalTps": self.rates(lambda t: t.found + t.missed),
            "msgPutTotalTodayNow": str(now.put),
            "msgGetTotalTodayNow": str(now.got),
            "msgPutTotalTodayMorning": str(self.today_morning.put),
            "msgGetTotalTodayMorning": str(self.today_morning.got),
            "msgPutTotalYesterdayMorning": str(self.yesterday_morning.put),
            "msgGetTotalYesterdayMorning": str(self.yesterday_morning.got),
        }


class GroupRates:
    """Messages per second each group took from each topic over about the last minute (the
    consumeTps of GET_CONSUME_STATS): delivery counts sampled every few seconds."""

    def __init__(
        self, counts: Callable[[], dict[tuple[str, str], int]], clock: Callable[[], float] = time.monotonic,
        samples: int = 7,
    ) -> None:  # fmt: skip
        """`counts`: messages delivered so far by (topic, group)."""
        self._counts = counts
        self._clock = clock
        self._samples: deque[tuple[float, dict[tuple[str, str], int]]] = deque(maxlen=samples)

    def sample(self) -> None:
        self._samples.append((self._clock(), self._counts()))

    def rate(self, topic: str, group: str) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, old), (t1, new) = self._samples[0], self._samples[-1]
        key = (topic, group)
        return (new.get(key, 0) - old.get(key, 0)) / (t1 - t0) if t1 > t0 else 0.0


def human_bytes(size: float) -> str:
    """RocketMQ's humanReadableByteCount (binary units): "512 B", "1.5 KiB", "20.0 GiB"."""
    if size < 1024:
        return f"{int(size)} B"
    exp = 0
    while size >= 1024 and exp < 6:
        size /= 1024
        exp += 1
    return f"{size:.1f} {'KMGTPE'[exp - 1]}iB"


_IDLE_POOLS = {
    # No thread pools queue requests here (one event loop): their queues are empty, their waits 0.
    # Capacities are RocketMQ's defaults, so that dashboards show the usual figures.
    "sendThreadPoolQueueSize": "0", "sendThreadPoolQueueCapacity": "10000",
    "pullThreadPoolQueueSize": "0", "pullThreadPoolQueueCapacity": "100000",
    "queryThreadPoolQueueSize": "0", "queryThreadPoolQueueCapacity": "20000",
    "sendThreadPoolQueueHeadWaitTimeMills": "0", "pullThreadPoolQueueHeadWaitTimeMills": "0",
    "queryThreadPoolQueueHeadWaitTimeMills": "0", "pageCacheLockTimeMills": "0",
    "remainTransientStoreBufferNumbs": "0", "dispatchMaxBuffer": "0",
    "putMessageEntireTimeMax": "0", "getMessageEntireTimeMax": "0",
    "putMessageDistributeTime": " ".join(
        f"[{span}]:0" for span in ("<=0ms", "0~10ms", "10~50ms", "50~100ms", "100~200ms", "200~500ms",
                                   "500ms~1s", "1~2s", "2~3s", "3~4s", "4~5s", "5~10s", "10s~")
    ),
}  # fmt: skip


def uptime_text(seconds: float) -> str:
    """RocketMQ's runtime format: "[ 0 days, 1 hours, 2 minutes, 3 seconds ]"."""
    s = int(seconds)
    return f"[ {s // 86400} days, {s % 86400 // 3600} hours, {s % 3600 // 60} minutes, {s % 60} seconds ]"


def disk_capacity_text(path: Path) -> str:
    """RocketMQ's commitLogDirCapacity: "Total : 20.0 GiB, Free : 5.5 GiB."."""
    usage = shutil.disk_usage(path)
    return f"Total : {human_bytes(usage.total)}, Free : {human_bytes(usage.free)}."


def store_info(
    *, cl_min: int, cl_max: int, flushed: int, dispatched: int, disk_percent: float, path: Path,
    put_messages: int, put_bytes: int, earliest: int, started_ms: int, uptime: float, version: int,
) -> dict[str, str]:  # fmt: skip
    """The store and process entries rocketmq-exporter parses (every one it reads must be there)."""
    return {
        **_IDLE_POOLS,
        "commitLogMinOffset": str(cl_min),
        "commitLogMaxOffset": str(cl_max),
        "remainHowManyDataToFlush": human_bytes(max(cl_max - flushed, 0)),
        "dispatchBehindBytes": str(max(cl_max - dispatched, 0)),
        "commitLogDiskRatio": f"{disk_percent / 100:.4f}",
        "consumeQueueDiskRatio": f"{disk_percent / 100:.4f}",
        "commitLogDirCapacity": disk_capacity_text(path),
        "putMessageTimesTotal": str(put_messages),
        "putMessageSizeTotal": str(put_bytes),
        "putMessageAverageSize": f"{put_bytes / put_messages if put_messages else 0.0:.2f}",
        "earliestMessageTimeStamp": str(earliest),
        "bootTimestamp": str(started_ms),
        "startAcceptSendRequestTimeStamp": str(started_ms),
        "runtime": uptime_text(uptime),
        "brokerVersion": str(version),
    }
