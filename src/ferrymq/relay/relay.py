"""Relay: reads a primary cluster's standby topic on the standby cluster and sends every message back
to its own topic (ORIGIN_TOPIC) on the primary, with its body, flag, tags, keys, properties and
message id, and RELAYED_FROM set so that nothing relays it again.

One task per queue of the standby topic: pull, put back each message in order (a message the
primary does not take is tried again until it does, so the relay simply waits out the outage),
then commit the queue's offset for the relay's consumer group on the standby. Progress is those
offsets: a relay that stops, or dies, goes on from the last commit. At-least-once: messages put
back after the last commit are put back again by the next relay (same message id, so consumers
that care can drop the second copy).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from ferrymq.client.instance import ClientError, ClientInstance
from ferrymq.client.message import Message, MessageExt, MessageQueue
from ferrymq.client.producer import Producer
from ferrymq.client.pull import (
    EVERY_TAG,
    PullStatus,
    initial_offset,
    master_addr,
    pull,
    pull_addr,
    query_offset,
)
from ferrymq.client.push_consumer import CONSUME_FROM_WHERE
from ferrymq.client.standby import ORIGIN_TOPIC, RELAYED_FROM
from ferrymq.net import RemotingError
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.protocol.bodies import ConsumerData
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.properties import Prop
from ferrymq.protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)

# What the standby's brokers wrote on a message, not its producer: the primary writes its own.
_BROKER_WRITTEN = frozenset({
    Prop.REAL_TOPIC, Prop.REAL_QID, Prop.DELAY, Prop.TIMER_DELIVER_MS, Prop.TIMER_DELAY_SEC,
    Prop.TIMER_DELAY_MS, "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", Prop.MIN_OFFSET,
    Prop.MAX_OFFSET, "CONSUME_START_TIME", "MSG_REGION", "TRACE_ON", "CLUSTER", ORIGIN_TOPIC,
})  # fmt: skip
_FAILURES = (ClientError, RemotingError)


@dataclass
class RelayStats:
    relayed: int = 0  # messages put back into the primary
    skipped: int = 0  # messages of the standby topic not from a diverted send, or relayed already
    failed_sends: int = 0  # sends to the primary that failed and were tried again


def put_back(message: MessageExt, standby_topic: str) -> Message | None:
    """The message to send to the primary for one read from the standby topic (None: not ours to relay)."""
    props = message.properties
    origin = props.get(ORIGIN_TOPIC)
    if not origin or RELAYED_FROM in props:
        return None
    kept = {k: v for k, v in props.items() if k not in _BROKER_WRITTEN}
    kept[RELAYED_FROM] = standby_topic
    return Message(origin, message.body, properties=kept, flag=message.flag)


class Relay:
    def __init__(
        self, standby_namesrv_addr: str, primary_namesrv_addr: str, topic: str, *, group: str | None = None,
        batch: int = 64, retry_pause: float = 0.5, queue_refresh: float = 10.0,
    ) -> None:  # fmt: skip
        """`topic`: the standby topic to drain; `group`: the consumer group whose offsets on the
        standby are the relay's progress (default RELAY_<topic>)."""
        self.topic = topic
        self.group = group or f"RELAY_{topic}"
        self.batch = batch
        self.retry_pause = retry_pause
        self.queue_refresh = queue_refresh
        self.stats = RelayStats()
        self.standby = ClientInstance(standby_namesrv_addr)
        self.primary = Producer(self.group, primary_namesrv_addr, retry_times_when_send_failed=1)
        self._tasks = BackgroundTasks(f"relay {topic}")
        self._queues: set[MessageQueue] = set()

    async def start(self) -> None:
        await self.standby.start()
        self.standby.consumers[self.group] = self._consumer_data  # admin tools see it, and its lag
        await self.primary.start()
        self._tasks.spawn(self._watch_queues(), name=f"queues of {self.topic}")

    async def stop(self) -> None:
        """Stop relaying; what was put back and not committed is put back again by the next relay."""
        await self._tasks.close()
        await self.primary.shutdown()
        await self.standby.close()

    async def __aenter__(self) -> Relay:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group, consume_type="CONSUME_ACTIVELY", message_model="CLUSTERING",
            consume_from_where=CONSUME_FROM_WHERE["first"],
            subscription_data_set=[EVERY_TAG.subscription(self.topic, 0)],
        )  # fmt: skip

    async def _watch_queues(self) -> None:
        """A task per queue of the standby topic, as queues appear (the topic may not exist yet)."""
        while True:
            try:
                route = await self.standby.existing_route(self.topic)
            except _FAILURES as e:
                log.warning("relay: no route of %s on the standby: %s", self.topic, e)
                route = None
            new = [mq for mq in (route.read_queues if route else ()) if mq not in self._queues]
            for mq in new:
                self._queues.add(mq)
                self._tasks.spawn(self._drain(mq), name=f"relay {mq}")
            if new:  # the brokers know the relay now, not at the next 30 s heartbeat
                await self.standby.heartbeat_all()
            await asyncio.sleep(self.queue_refresh if self._queues else self.retry_pause)

    async def _drain(self, mq: MessageQueue) -> None:
        offset = await self._retrying(self._start_offset, mq)
        while True:
            result = await self._retrying(self._pull, mq, offset)
            for message in result.messages:
                await self._relay(message)
            if result.status is not PullStatus.NO_NEW_MSG and result.next_begin_offset != offset:
                offset = result.next_begin_offset
                await self._retrying(self._commit, mq, offset)

    async def _start_offset(self, mq: MessageQueue) -> int:
        addr = await master_addr(self.standby, mq)
        committed = await query_offset(self.standby, addr, mq, self.group)
        if committed is not None and committed >= 0:
            return committed
        return await initial_offset(self.standby, addr, mq, "first", 0)

    async def _pull(self, mq: MessageQueue, offset: int):
        addr = await pull_addr(self.standby, mq)
        return await pull(
            self.standby, addr, mq, self.group, offset, max_messages=self.batch, suspend_ms=5000
        )

    async def _commit(self, mq: MessageQueue, offset: int) -> None:
        """Answered, not one-way as consumers commit: a relay started next must see it."""
        ext = {
            "consumerGroup": self.group,
            "topic": mq.topic,
            "queueId": str(mq.queue_id),
            "commitOffset": str(offset),
        }
        request = RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=ext)
        response = await self.standby.invoke(await master_addr(self.standby, mq), request)
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"offset of {mq} not committed: {response.remark}")

    async def _relay(self, message: MessageExt) -> None:
        back = put_back(message, self.topic)
        if back is None:
            self.stats.skipped += 1
            return
        while True:
            try:
                await self.primary.send(back)
            except _FAILURES as e:
                self.stats.failed_sends += 1
                if self.stats.failed_sends == 1 or self.stats.failed_sends % 100 == 0:
                    log.warning("relay: the primary does not take %s yet: %s", back.topic, e)
                await asyncio.sleep(self.retry_pause)
                continue
            self.stats.relayed += 1
            return

    async def _retrying(self, call, *args):
        """`call(*args)` against the standby, tried again while the standby fails."""
        while True:
            try:
                return await call(*args)
            except _FAILURES as e:
                log.warning("relay: standby %s failed: %s", getattr(call, "__name__", call), e)
                await asyncio.sleep(self.retry_pause)
