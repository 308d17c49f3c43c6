"""A token bucket, shared by the consumption control of groups and by quotas.

`rate` tokens a second, holding at most `burst` (default one second's worth). Debts are allowed: a
request admitted with one token left may cost more (a batch, a pull that found many messages), and
later requests wait the debt off, so over time no more than `rate` a second get through.
"""

from __future__ import annotations

import time


class TokenBucket:
    __slots__ = ("burst", "rate", "stamp", "tokens")

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = rate
        self.burst = rate if burst is None else burst
        self.tokens = self.burst
        self.stamp = time.monotonic()

    def available(self) -> float:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        return self.tokens

    def take(self, n: float) -> None:
        self.available()
        self.tokens -= n

    def next_token_in(self) -> float:
        """Seconds until at least one whole token is there."""
        return max(0.0, (1 - self.available()) / self.rate)
