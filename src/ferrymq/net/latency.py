"""Request latency by request and response code, as histogram bucket counts in plain ints.

The remoting dispatcher records every answered request here (a bisect and an increment); the metrics
collector turns the counts into a Prometheus histogram at scrape time. Buckets are milliseconds, as
RocketMQ 5's ``rocketmq_rpc_latency``.
"""

from __future__ import annotations

from bisect import bisect_left

BOUNDS_MS: tuple[float, ...] = (1, 3, 5, 10, 30, 50, 100, 300, 500, 1000, 3000, 5000)
"""Upper bounds (inclusive) of the buckets; one more bucket takes everything slower."""
_BOUNDS_S = tuple(bound / 1000 for bound in BOUNDS_MS)  # compared with seconds: no multiply per request


class RequestLatency:
    __slots__ = ("table",)

    def __init__(self) -> None:
        self.table: dict[tuple[int, int], list[float]] = {}
        """(request code, response code) → per-bucket counts (len(BOUNDS_MS) + 1), then the sum in s"""

    def record(self, request_code: int, response_code: int, seconds: float) -> None:
        row = self.table.get((request_code, response_code))
        if row is None:
            row = self.table[(request_code, response_code)] = [0] * (len(BOUNDS_MS) + 2)
        row[bisect_left(_BOUNDS_S, seconds)] += 1
        row[-1] += seconds

    def rows(self) -> list[tuple[int, int, list[float]]]:
        """(request code, response code, counts + sum in ms) of each pair seen, copied for a scrape."""
        return [(req, resp, [*row[:-1], row[-1] * 1000]) for (req, resp), row in list(self.table.items())]
