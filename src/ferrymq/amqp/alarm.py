"""RabbitMQ's resource alarm, for the brokers behind the gateway: when a put is refused because the
broker cannot write (disk full, not a master now, busy), connections that understand it get
`connection.blocked` with the reason and the gateway stops reading from connections that publish,
as RabbitMQ does; a probe message to SELF_TEST_TOPIC each PROBE_S tells when writes are taken again,
then `connection.unblocked` goes out and reading resumes.

A put refused by a quota (flow control: SYSTEM_BUSY "[TOO_MANY_REQUESTS]...") blocks publishers the
same way; the publisher that met it waits and puts again (publisher.py), and its first stored put
unblocks them: the publishes are slowed to the quota, never dropped."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ferrymq.messaging.api import MessagingError, SendOutcome
from ferrymq.protocol.codes import FLOW_CONTROL_REMARK, ResponseCode

if TYPE_CHECKING:
    from ferrymq.amqp.gateway import Gateway

log = logging.getLogger(__name__)
PROBE_TOPIC = "SELF_TEST_TOPIC"  # every broker has it (RocketMQ's self-test topic)
PROBE_S = 1.0
BLOCKING_CODES = frozenset((ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_BUSY))


class ResourceAlarm:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.reason: str | None = None  # set while the alarm is on
        self._cleared = asyncio.Event()
        self._cleared.set()
        self._flow_control = False  # set off by a quota: cleared by the next stored put, no probe

    @property
    def on(self) -> bool:
        return self.reason is not None

    def check(self, outcome: SendOutcome) -> None:
        """A put's outcome: one the brokers refused for lack of resources sets the alarm off."""
        if outcome.code in BLOCKING_CODES and not self.on:
            if flow_controlled(outcome):
                self._flow_control = True
                self._raise(f"flow control: {(outcome.remark or '')[len(FLOW_CONTROL_REMARK) :]}")
            else:
                self._raise(f"low on resources: {outcome.remark or outcome.code}")
                self.gateway.tasks.spawn(self._probe(), "resource alarm probe")

    def stored(self) -> None:
        """A put was stored: an alarm set off by flow control is over."""
        if self._flow_control:
            self._clear()

    def _raise(self, reason: str) -> None:
        self.reason = reason[:255]
        self._cleared.clear()
        log.warning("AMQP publishers blocked: %s", self.reason)
        for session in self.gateway.sessions():
            session.blocked(self.reason)

    async def wait_cleared(self) -> None:
        await self._cleared.wait()

    async def _probe(self) -> None:
        while True:
            await asyncio.sleep(PROBE_S)
            try:
                outcome = await self.gateway.service.send(PROBE_TOPIC, b"ferrymq AMQP gateway probe")
            except MessagingError:
                continue
            if outcome.stored:
                break
        self._clear()

    def _clear(self) -> None:
        log.warning("AMQP publishers unblocked")
        self.reason = None
        self._flow_control = False
        self._cleared.set()
        for session in self.gateway.sessions():
            session.unblocked()


def flow_controlled(outcome: SendOutcome) -> bool:
    """Whether a put was refused by a quota (slow down and put again), not for lack of resources."""
    return outcome.code == ResponseCode.SYSTEM_BUSY and (outcome.remark or "").startswith(FLOW_CONTROL_REMARK)
