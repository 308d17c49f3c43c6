"""Flow control of one publishing connection over a quota.

A put the brokers refuse with flow control (SYSTEM_BUSY "[TOO_MANY_REQUESTS]...": a produce quota)
is put again until it is stored; meanwhile its connection gets `connection.blocked` (to clients that
announce the capability) and is not read from, as RabbitMQ does with a publisher it throttles, and
gets `connection.unblocked` once no put of it waits any more. Other connections go on: a quota on one
topic does not stop the publishers of others (the resource alarm, alarm.py, stops them all).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ferrymq.messaging.api import SendOutcome
from ferrymq.protocol.codes import FLOW_CONTROL_REMARK, ResponseCode


def flow_controlled(outcome: SendOutcome) -> bool:
    """Whether a put was refused by a quota (slow down and put again), not for lack of resources."""
    return outcome.code == ResponseCode.SYSTEM_BUSY and (outcome.remark or "").startswith(FLOW_CONTROL_REMARK)


class PublisherThrottle:
    """One connection's puts waiting on flow control; `blocked`/`unblocked` tell its client."""

    def __init__(self, blocked: Callable[[str], None], unblocked: Callable[[], None]) -> None:
        self._blocked, self._unblocked = blocked, unblocked
        self._waiting = 0
        self._flowing = asyncio.Event()
        self._flowing.set()

    @property
    def on(self) -> bool:
        return self._waiting > 0

    def hold(self, outcome: SendOutcome) -> None:
        """A put of the connection waits on flow control (`outcome` says why)."""
        self._waiting += 1
        if self._waiting == 1:
            self._flowing.clear()
            self._blocked(f"flow control: {(outcome.remark or '')[len(FLOW_CONTROL_REMARK) :]}"[:255])

    def let_go(self) -> None:
        """That put is stored (or given up)."""
        self._waiting -= 1
        if self._waiting == 0:
            self._flowing.set()
            self._unblocked()

    async def wait(self) -> None:
        await self._flowing.wait()
