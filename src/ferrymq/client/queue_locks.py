"""Broker locks on queues, for orderly consumption in CLUSTERING mode (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ).

Only the member holding a queue's lock on its broker consumes it, so a queue changing hands never
has two members consuming it at once. Brokers keep a lock 60 s; members renew theirs every 20 s and
stop trusting one not renewed for 30 s (see ProcessQueue.locked).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from ferrymq.client.aio import wait_event
from ferrymq.client.instance import ClientError, ClientInstance
from ferrymq.client.message import MessageQueue
from ferrymq.client.process_queue import ProcessQueue, by_broker
from ferrymq.net import RemotingError
from ferrymq.protocol.bodies import (
    LockBatchRequestBody,
    LockBatchResponseBody,
    UnlockBatchRequestBody,
    decode_body,
    encode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)

LOCK_INTERVAL = 20.0  # renewal; brokers keep a lock 60 s
CALL_ERRORS = (ClientError, RemotingError)


class QueueLocks:
    def __init__(
        self, instance: ClientInstance, group: str, addr_of: Callable[[MessageQueue], Awaitable[str]]
    ) -> None:
        self.instance = instance
        self.group = group
        self.addr_of = addr_of

    async def lock(self, pqs: list[ProcessQueue]) -> None:
        """Lock (or renew) queues of one broker; each queue learns whether it holds its lock."""
        response = await self._request(RequestCode.LOCK_BATCH_MQ, LockBatchRequestBody, pqs)
        granted = set(decode_body(LockBatchResponseBody, response.body).lock_ok_mq_set)
        for pq in pqs:
            pq.set_locked(pq.mq in granted)

    async def lock_all(self, pqs: Iterable[ProcessQueue]) -> None:
        """Lock queues of any brokers, one request per broker; a broker that fails is logged."""
        for same_broker in by_broker(pqs).values():
            try:
                await self.lock(same_broker)
            except CALL_ERRORS as e:
                log.warning("locking queues of group %s failed: %s", self.group, e)

    async def unlock_all(self, pqs: Iterable[ProcessQueue]) -> None:
        for same_broker in by_broker(pqs).values():
            try:
                await self._request(RequestCode.UNLOCK_BATCH_MQ, UnlockBatchRequestBody, same_broker)
            except CALL_ERRORS as e:
                log.warning("unlocking queues of group %s failed: %s", self.group, e)

    async def renew(self, owned: Callable[[], Iterable[ProcessQueue]], stop: asyncio.Event) -> None:
        """Renew the locks of the queues owned now, every LOCK_INTERVAL s until `stop`."""
        while True:
            await wait_event(stop, LOCK_INTERVAL)
            if stop.is_set():
                return
            await self.lock_all(list(owned()))

    async def _request(
        self, code: int, body_type: type[LockBatchRequestBody], pqs: list[ProcessQueue]
    ) -> RemotingCommand:
        body = body_type(consumer_group=self.group, client_id=self.instance.client_id,
                         mq_set=[pq.mq for pq in pqs])  # fmt: skip
        request = RemotingCommand(code, body=encode_body(body))
        response = await self.instance.invoke(await self.addr_of(pqs[0].mq), request)
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"queue lock request {code} refused: {response.remark}")
        return response
