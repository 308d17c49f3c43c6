"""A concurrent push consumer's failed and overdue messages go back to the broker for redelivery.

RocketMQ's way: CONSUMER_SEND_MSG_BACK asks the broker to store the message again in
`%RETRY%<group>` after a growing delay (or in `%DLQ%<group>` once it failed too often); if the
broker cannot be asked, the message is sent to the retry topic by an ordinary producer with its
count in the header; only if that fails too is it consumed again here (the caller's local retry).
A message still being consumed `consume_timeout` minutes after it started is sent back the same
way and let go of, so a hung listener holds back neither the queue's offset nor the message.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from ferrymq.client.aio import wait_event
from ferrymq.client.instance import ClientError, ClientInstance
from ferrymq.client.message import RETRY_PREFIX, Message, MessageExt, MessageQueue
from ferrymq.client.process_queue import ProcessQueue
from ferrymq.client.producer import Producer
from ferrymq.net import RemotingError
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import ConsumerSendMsgBackRequestHeader
from ferrymq.protocol.properties import Prop
from ferrymq.protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)

CONSUME_START_TIME = "CONSUME_START_TIME"
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
TIMEOUT_DELAY_LEVEL = 3  # what RocketMQ's cleanExpireMsg asks for
EXPIRY_SCAN = 16  # messages looked at per queue per round, oldest first
_ERRORS = (ClientError, RemotingError)
_NOT_RESENT = (CONSUME_START_TIME, Prop.MIN_OFFSET, Prop.MAX_OFFSET, "TRAN_MSG")


class Redelivery:
    """Sends one consumer group's messages back for redelivery; knows the group, not the consumer."""

    def __init__(
        self, instance: ClientInstance, group: str, *, max_reconsume_times: int,
        addr_of: Callable[[MessageQueue], Awaitable[str]], consume_timeout_minutes: float,
    ) -> None:  # fmt: skip
        if consume_timeout_minutes <= 0:
            raise ValueError(f"consume_timeout must be positive (minutes), not {consume_timeout_minutes!r}")
        self.instance = instance
        self.group = group
        self.max_reconsume_times = max_reconsume_times
        self.addr_of = addr_of
        self.timeout_ms = consume_timeout_minutes * 60_000
        self._producer: Producer | None = None

    @staticmethod
    def starting(messages: list[MessageExt]) -> None:
        """Stamp the consume start time the timeout is measured from (RocketMQ's property)."""
        now = str(time.time_ns() // 1_000_000)
        for m in messages:
            m.properties[CONSUME_START_TIME] = now

    async def send_back(
        self, mq: MessageQueue, messages: list[MessageExt], delay_level: int = 0
    ) -> list[MessageExt]:
        """Send each message back; return those that could not be, to be consumed again here."""
        kept = []
        for m in messages:
            refused = await self._ask_broker(mq, m, delay_level)
            if refused is None:
                continue
            try:
                await self._resend(m, delay_level)
            except Exception as e:  # whatever failed, the message must not be stuck: consume it here
                log.info("message %s could not be sent back (%s, then %s); it is consumed again here",
                         m.msg_id, refused, e, exc_info=not isinstance(e, _ERRORS))  # fmt: skip
                kept.append(m)
        return kept

    async def dead_letter(self, mq: MessageQueue, m: MessageExt) -> bool:
        """Straight to the group's DLQ (delay level -1, as RocketMQ), for a message no listener could
        ever consume; True once the broker has it."""
        return await self._ask_broker(mq, m, -1) is None

    async def _ask_broker(self, mq: MessageQueue, m: MessageExt, delay_level: int) -> str | None:
        """CONSUMER_SEND_MSG_BACK; None when the broker took the message, else why not."""
        header = ConsumerSendMsgBackRequestHeader(
            offset=m.commitlog_offset, group=self.group, delay_level=delay_level, origin_msg_id=m.msg_id,
            origin_topic=m.topic, max_reconsume_times=self.max_reconsume_times,
        )  # fmt: skip
        request = RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=header.to_ext_fields())
        try:
            response = await self.instance.invoke(await self.addr_of(mq), request)
        except _ERRORS as e:
            return str(e)
        return None if response.code == ResponseCode.SUCCESS else response.remark or f"code {response.code}"

    async def _resend(self, m: MessageExt, delay_level: int) -> None:
        """The fallback: a new message to %RETRY%<group> carrying the original's provenance."""
        props = {k: v for k, v in m.properties.items() if k not in _NOT_RESENT}
        props.setdefault(Prop.RETRY_TOPIC, m.topic)
        props[Prop.ORIGIN_MESSAGE_ID] = props.get(Prop.ORIGIN_MESSAGE_ID) or m.msg_id
        props[Prop.RECONSUME_TIME] = str(m.reconsume_times + 1)
        props[Prop.MAX_RECONSUME_TIMES] = str(self.max_reconsume_times)
        retry = Message(RETRY_PREFIX + self.group, m.body, properties=props, flag=m.flag,
                        delay_level=delay_level or 3 + m.reconsume_times)  # fmt: skip
        if self._producer is None:
            self._producer = Producer(INNER_PRODUCER_GROUP, "", instance=self.instance)
            await self._producer.start()
        await self._producer.send(retry)

    # --- consume timeout ------------------------------------------------------------------------

    async def watch_timeouts(
        self, owned: Callable[[], Iterable[ProcessQueue]], settled: Callable[[ProcessQueue], None],
        stop: asyncio.Event,
    ) -> None:  # fmt: skip
        """Every quarter of the timeout (at most a minute) until `stop`, send back the messages of
        the `owned` queues consumed for too long; `settled(pq)` is told when one left its queue."""
        period = min(self.timeout_ms / 4000, 60.0)
        while True:
            await wait_event(stop, period)
            if stop.is_set():
                return
            for pq in list(owned()):
                try:
                    if await self._expire(pq):
                        settled(pq)
                except Exception:
                    log.exception("consume-timeout check of %s failed", pq.mq)

    async def _expire(self, pq: ProcessQueue) -> bool:
        """Send back the queue's overdue messages; True when any left the queue."""
        now = time.time_ns() // 1_000_000
        expired = False
        for m in pq.head(EXPIRY_SCAN):
            started = m.properties.get(CONSUME_START_TIME)
            if started is None or now - int(started) <= self.timeout_ms or pq.dropped:
                continue
            log.warning("message %s of %s has been consumed for over %g min: sending it back",
                        m.msg_id, pq.mq.topic, self.timeout_ms / 60_000)  # fmt: skip
            if await self.send_back(pq.mq, [m], TIMEOUT_DELAY_LEVEL):
                continue  # not sent back: it stays, and is looked at again next round
            pq.remove([m])
            expired = True
        return expired

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.shutdown()
            self._producer = None
