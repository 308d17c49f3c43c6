"""Delivery intents: a master whose slave may act for it (enable_slave_acting_master) says in its log
which held-back messages it is about to deliver, and delivers them only once every connected slave
has that record.

Why: a delivery the master stored but had not replicated when it died is in its log only; the slave
acting for it would deliver the message again, and a consumer may already have read the first copy
from the master, so no reconciliation once the master is back could take it back. With the intent
replicated first, the slave's copy of the log tells the three cases apart: an intent followed by the
delivery (delivered: counted), no intent (not delivered: the slave delivers it), an intent without
the delivery (undecided: the master may have stored it). The slave leaves the undecided ones to the
master and hands them back with its progress; the returning master's own log says which it stored,
and it delivers the others (schedule/service.py). The cost is one small record and one replication
round trip per chunk of up to INTENT_CHUNK deliveries, paid only while a slave is connected.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Awaitable, Callable

from ferrymq.ha.dledger.command import PutCommand
from ferrymq.protocol.record import pack_host
from ferrymq.store import PutResult, PutStatus

log = logging.getLogger(__name__)

INTENT_TOPIC = "rmq_sys_schedule_intent"
INTENT_CHUNK = 16_384  # due messages one intent names at most (128 KiB): one round trip per chunk
ACK_TIMEOUT = 3.0  # seconds the master waits for its slaves to have an intent before retrying later
_ACK_POLL = 0.001
_ORIGIN = struct.Struct(">q")
_HOST = pack_host("127.0.0.1", 0)


def encode_origins(origins: list[int]) -> bytes:
    """An intent's body: the CommitLog offsets of the held-back records about to be delivered."""
    return b"".join(_ORIGIN.pack(o) for o in origins)


def decode_origins(body: bytes | memoryview) -> list[int]:
    return [o for (o,) in _ORIGIN.iter_unpack(body[: len(body) // _ORIGIN.size * _ORIGIN.size])]


async def no_intent(origins: list[int]) -> bool:
    """Deliver without an intent (no slave may act for this broker)."""
    return True


class DeliveryIntents:
    def __init__(
        self,
        put: Callable[[PutCommand], Awaitable[PutResult]],
        written: Callable[[], None],
        replica_acks: Callable[[], list[int]],
    ) -> None:
        """`replica_acks()`: how far each connected slave has acknowledged this log (none: none is)."""
        self._put = put
        self._written = written
        self._replica_acks = replica_acks
        self.written_intents = 0

    async def __call__(self, origins: list[int]) -> bool:
        """Store the intent to deliver `origins` and wait until every connected slave has it; False if
        it could not be stored or a slave did not acknowledge it in time (deliver later)."""
        if not origins or not self._replica_acks():
            return True
        result = await self._put(PutCommand(INTENT_TOPIC, 0, encode_origins(origins), born_host=_HOST))
        if result.status is not PutStatus.PUT_OK:
            log.error("scheduled delivery: intent not stored (%s)", result.remark or result.status.name)
            return False
        self._written()
        self.written_intents += 1
        end = result.wrote_offset + result.wrote_bytes
        deadline = time.monotonic() + ACK_TIMEOUT
        while min(self._replica_acks(), default=end) < end:
            if time.monotonic() > deadline:
                log.warning("scheduled delivery waits: a slave has not acknowledged the intent at %d",
                            result.wrote_offset)  # fmt: skip
                return False
            await asyncio.sleep(_ACK_POLL)
        return True
