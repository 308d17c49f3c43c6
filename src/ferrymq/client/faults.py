"""Broker avoidance: a broker that failed (or answered slowly) is skipped for a while.

RocketMQ's latency fault tolerance, simplified: a failure benches the broker for `backoff`
seconds, doubling (up to `max_backoff`) while it keeps failing; a send slower than `slow` seconds
benches it briefly. Producers then fail over within one send, not one route-refresh period.
"""

from __future__ import annotations

import time


class BrokerAvoidance:
    def __init__(self, backoff: float = 3.0, max_backoff: float = 60.0, slow: float = 1.0) -> None:
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.slow = slow
        self._until: dict[str, float] = {}
        self._strikes: dict[str, int] = {}

    @property
    def benched(self) -> bool:
        """Whether any broker may be in back-off now (false is the usual, healthy case)."""
        return bool(self._until)

    def available(self, broker: str) -> bool:
        until = self._until.get(broker)
        return until is None or time.monotonic() >= until

    def failed(self, broker: str) -> None:
        strikes = self._strikes[broker] = self._strikes.get(broker, 0) + 1
        self._until[broker] = time.monotonic() + min(self.backoff * 2 ** (strikes - 1), self.max_backoff)

    def succeeded(self, broker: str, seconds: float) -> None:
        if self._strikes:  # (empty while every broker is fine: one call per send)
            self._strikes.pop(broker, None)
        if seconds > self.slow:
            self._until[broker] = time.monotonic() + self.backoff
        elif self._until:
            self._until.pop(broker, None)
