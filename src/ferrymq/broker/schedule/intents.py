"""Intents: a master whose slave may act for it (enable_slave_acting_master) says in its log what it
is about to do that a consumer could see — deliver held-back messages, commit a transaction — and
does it only once every connected slave has that record.

Why: a delivery (or commit) the master stored but had not replicated when it died is in its log
only; the slave acting for it would deliver the message again (or ask the producer again and commit
a second time), and a consumer may already have read the first copy from the master, so no
reconciliation once the master is back could take it back. With the intent replicated first, the
slave's copy of the log tells the three cases apart: an intent followed by the deed (done: counted),
no intent (not done: the slave does it), an intent without the deed (undecided: the master may have
done it). The slave leaves the undecided ones to the master, whose own log says which it did
(schedule/service.py, transactions.py); if the master stays away longer than
`slave_acting_undecided_timeout`, the slave does them, at least once.

A slave that does not acknowledge an intent within `slave_acting_intent_timeout` (stalled: connected
but not reading) no longer holds the master back: the master goes on without it until it has caught
up with the intents, and logs it. Should that slave act meanwhile, what the master did while it was
left out may be done twice (at least once). The cost is one small record and one replication round
trip per chunk of up to INTENT_CHUNK deliveries (per commit), paid only while a slave is connected.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
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
WAITS_AFTER = 1.0  # seconds of waiting for a slave before the master says so in its log
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


class Intents:
    def __init__(
        self,
        put: Callable[[PutCommand], Awaitable[PutResult]],
        written: Callable[[], None],
        replica_acks: Callable[[], dict[int, int]],
        ack_timeout: float,
    ) -> None:
        """`replica_acks()`: how far each connected slave (by broker id) has acknowledged this log
        (empty: none is connected); `ack_timeout`: seconds a slave may take to acknowledge an intent
        before the master goes on without it."""
        self._put = put
        self._written = written
        self._replica_acks = replica_acks
        self.ack_timeout = ack_timeout
        self.left_out: set[int] = set()  # slaves that did not acknowledge in time, until they catch up
        self._last_end = 0  # where the last intent stored ends
        self._waiting: list[tuple[int, int, asyncio.Future[None], str]] = []  # heap: (end, seq, waiter, what)
        self._seq = itertools.count()
        self._ticker: asyncio.Task[None] | None = None
        self.written_intents = 0

    async def deliveries(self, origins: list[int]) -> bool:
        """The intent to deliver the held-back records at CommitLog offsets `origins`."""
        if not origins:
            return True
        return await self.record(PutCommand(INTENT_TOPIC, 0, encode_origins(origins), born_host=_HOST),
                                 "scheduled delivery")  # fmt: skip

    async def record(self, command: PutCommand, what: str) -> bool:
        """Store the intent `command` and wait until every connected slave that keeps up has it; False
        if it could not be stored (do it later)."""
        if not self._replica_acks():
            return True
        result = await self._put(command)
        if result.status is not PutStatus.PUT_OK:
            log.error("%s: intent not stored (%s)", what, result.remark or result.status.name)
            return False
        self._written()
        self.written_intents += 1
        end = result.wrote_offset + result.wrote_bytes
        lagging = self._lagging(end, self._replica_acks())  # a slave left out may be waited for again
        self._last_end = max(self._last_end, end)
        if not lagging:
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (end, next(self._seq), waiter, what))
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.create_task(self._tick())
        try:
            await asyncio.wait_for(waiter, self.ack_timeout)
        except TimeoutError:
            if lagging := self._lagging(end, self._replica_acks()):
                self.left_out |= lagging
                log.warning("%s goes on without slave %s: it has not acknowledged the intent at %d in %.1f s "
                            "(should it act for this broker, what is done meanwhile may be done twice)",
                            what, _ids(lagging), result.wrote_offset, self.ack_timeout)  # fmt: skip
        return True

    async def _tick(self) -> None:
        """While intents wait (commits may be many at once): look at the slaves' progress every
        millisecond and release the intents every slave waited for has."""
        waiting, started, said = self._waiting, time.monotonic(), False
        while waiting:
            await asyncio.sleep(_ACK_POLL)
            acks = self._replica_acks()
            lagging = self._lagging(waiting[0][0], acks)
            floor = min((acked for slave, acked in acks.items() if slave not in self.left_out), default=None)
            while waiting and (floor is None or waiting[0][0] <= floor):
                waiter = heapq.heappop(waiting)[2]
                if not waiter.done():
                    waiter.set_result(None)
            if waiting and not said and time.monotonic() - started > WAITS_AFTER:
                said = True
                log.warning("%s waits: slave %s has not acknowledged the intent ending at %d",
                            waiting[0][3], _ids(lagging), waiting[0][0])  # fmt: skip

    def _lagging(self, end: int, acks: dict[int, int]) -> set[int]:
        """The connected slaves waited for whose acknowledgement `acks` is short of `end`; a slave
        left out is waited for again once it has every intent stored so far."""
        for slave in [s for s in self.left_out if acks.get(s, -1) >= self._last_end or s not in acks]:
            self.left_out.discard(slave)
            if slave in acks:
                log.warning("slave %s caught up with the intents: waited for again", slave)
        return {slave for slave, acked in acks.items() if acked < end and slave not in self.left_out}


def _ids(slaves: set[int]) -> str:
    return ",".join(map(str, sorted(slaves)))
