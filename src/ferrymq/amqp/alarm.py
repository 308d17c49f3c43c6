"""RabbitMQ's resource alarm, for the brokers behind the gateway: when a put is refused because the
broker cannot write (disk full, not a master now, busy), connections that understand it get
`connection.blocked` with the reason and the gateway stops reading from connections that publish,
as RabbitMQ does; a probe message to SELF_TEST_TOPIC each PROBE_S tells when writes are taken again,
then `connection.unblocked` goes out and reading resumes."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ferrymq.messaging.api import MessagingError, SendOutcome
from ferrymq.protocol.caller import CALLER
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.topic_names import SELF_TEST_TOPIC

if TYPE_CHECKING:
    from ferrymq.amqp.gateway import Gateway

log = logging.getLogger(__name__)
PROBE_TOPIC = SELF_TEST_TOPIC  # every broker has it (RocketMQ's self-test topic)
PROBE_S = 1.0
BLOCKING_CODES = frozenset((ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_BUSY))


class ResourceAlarm:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.reason: str | None = None  # set while the alarm is on
        self._cleared = asyncio.Event()
        self._cleared.set()

    @property
    def on(self) -> bool:
        return self.reason is not None

    def check(self, outcome: SendOutcome) -> None:
        """A put's outcome: one the brokers refused for lack of resources sets the alarm off."""
        if outcome.code in BLOCKING_CODES and not self.on:
            self.reason = f"low on resources: {outcome.remark or outcome.code}"[:255]
            self._cleared.clear()
            log.warning("AMQP publishers blocked: %s", self.reason)
            for session in self.gateway.sessions():
                session.blocked(self.reason)
            self.gateway.tasks.spawn(self._probe(), "resource alarm probe")

    async def wait_cleared(self) -> None:
        await self._cleared.wait()

    async def _probe(self) -> None:
        CALLER.set(None)  # shared by every connection: no one user's quotas apply (the task copied
        # the context of the connection that started it)
        while True:
            await asyncio.sleep(PROBE_S)
            try:
                outcome = await self.gateway.service.send(PROBE_TOPIC, b"ferrymq AMQP gateway probe")
            except MessagingError:
                continue
            if outcome.stored:
                break
        log.warning("AMQP publishers unblocked")
        self.reason = None
        self._cleared.set()
        for session in self.gateway.sessions():
            session.unblocked()
