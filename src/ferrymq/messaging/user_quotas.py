"""The brokers' per-user quotas, applied by a front that reaches them over remoting (a standalone
gRPC proxy or AMQP gateway).

The brokers see such a front's requests as its own AccessKey's, not as those of the clients it
serves; so the front keeps the ``User:`` quotas itself, read from the brokers (QUOTA_LIST) and taken
as read for ``ttl`` seconds, and applies them to the user each call is made for (``CALLER``, set by
the front's login or gate). Topic and group quotas stay the brokers' to apply. Each front applies
its own buckets: n fronts let a user through n times the limit, as n brokers do for a topic.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ferrymq.broker.quota.limiter import QuotaLimiter
from ferrymq.broker.quota.model import QuotaError
from ferrymq.messaging.api import MessagingError

log = logging.getLogger(__name__)
ReadQuotas = Callable[[], Awaitable[list[dict[str, Any]]]]


class UserQuotas:
    def __init__(self, read: ReadQuotas, ttl: float) -> None:
        """``read``: the brokers' quotas as QUOTA_LIST lists them; MessagingError when it cannot."""
        self._read = read
        self.ttl = ttl
        self.limiter = QuotaLimiter()
        self._until = 0.0  # the limiter is as read until then
        self._reading: asyncio.Future[None] | None = None

    async def current(self) -> QuotaLimiter:
        """The users' quotas, read again once ``ttl`` has passed (one read for every caller waiting)."""
        if time.monotonic() >= self._until:
            if self._reading is None:
                self._reading = asyncio.ensure_future(self._reload())
            reading = self._reading
            try:
                await asyncio.shield(reading)
            finally:
                if reading.done() and self._reading is reading:
                    self._reading = None
        return self.limiter

    async def _reload(self) -> None:
        quotas = await self._read()
        try:
            self.limiter.restore([q for q in quotas if str(q.get("resource", "")).startswith("User:")])
        except QuotaError as e:
            raise MessagingError(f"the brokers' quotas do not parse: {e}") from e
        self._until = time.monotonic() + self.ttl

    async def admit_put(self, user: str | None) -> str | None:
        """None when ``user`` (None: nobody's) may put now; else the flow-control remark."""
        if user is None:
            return None
        limiter = await self.current()
        return limiter.admit_put("", user) if limiter.produce else None

    def charge_put(self, user: str | None, count: int, nbytes: int) -> None:
        if user is not None and self.limiter.produce:
            self.limiter.charge_put("", user, count, nbytes)

    async def consume_allowance(self, user: str | None) -> tuple[float, float]:
        """(messages ``user`` may take now, seconds until one more may go when none may)."""
        if user is None:
            return float("inf"), 0.0
        limiter = await self.current()
        return limiter.consume_allowance("", "", user) if limiter.consume else (float("inf"), 0.0)

    def consume_allowance_now(self, user: str) -> tuple[float, float]:
        """``consume_allowance`` without waiting: by the quotas as last read, read again in the
        background once ``ttl`` has passed (for a caller that cannot wait, e.g. a feed handing out
        messages)."""
        if time.monotonic() >= self._until and self._reading is None:
            reading = self._reading = asyncio.ensure_future(self._reload())
            reading.add_done_callback(self._read_in_background)
        limiter = self.limiter
        return limiter.consume_allowance("", "", user) if limiter.consume else (float("inf"), 0.0)

    def _read_in_background(self, reading: asyncio.Future[None]) -> None:
        if self._reading is reading:
            self._reading = None
        if not reading.cancelled() and (error := reading.exception()) is not None:
            log.warning("user quotas not read again, the last ones stay: %s", error)
            self._until = time.monotonic() + self.ttl  # not again at every call

    def charge_consume(self, user: str | None, count: int, nbytes: int) -> None:
        if user is not None and count and self.limiter.consume:
            self.limiter.charge_consume("", "", user, count, nbytes)
