"""Dead letters: what a group gave up on, in %DLQ%<group>, listed and sent back to their topics.

Listing reads the DLQ with RocketMQ's tools group, so no consumer group's offsets move. Re-sending
stores each chosen message again in the topic it first failed on (its RETRY_TOPIC property), with
its id, keys, tags and user properties and a fresh retry count; the broker's bookkeeping properties
are left behind. The dead letters stay in the DLQ (a queue is append-only), so re-sending the same
ones twice sends them twice.
"""

from __future__ import annotations

from collections.abc import Iterable

from ferrymq.client.instance import ClientError, ClientInstance
from ferrymq.client.message import Message, MessageExt, SendResult
from ferrymq.client.producer import Producer
from ferrymq.client.pull import PullStatus, pull, queue_offset
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.properties import Prop

DLQ_PREFIX = "%DLQ%"
TOOLS_GROUP = "TOOLS_CONSUMER"  # RocketMQ's MixAll.TOOLS_CONSUMER_GROUP
RESEND_GROUP = "TOOLS_DLQ_RESEND"
_BOOKKEEPING = frozenset({
    Prop.RETRY_TOPIC, Prop.DELAY, Prop.REAL_TOPIC, Prop.REAL_QID, Prop.MIN_OFFSET, Prop.MAX_OFFSET, Prop.WAIT,
    Prop.RECONSUME_TIME, Prop.MAX_RECONSUME_TIMES, Prop.TIMER_DELIVER_MS, Prop.TIMER_DELAY_SEC,
    Prop.TIMER_DELAY_MS, "TIMER_OUT_MS", "TIMER_DEQUEUE_MS", "CONSUME_START_TIME",
})  # fmt: skip


async def list_dead_letters(instance: ClientInstance, group: str, limit: int = 1000) -> list[MessageExt]:
    """Up to `limit` of `group`'s dead letters, oldest first; none if the group never had one."""
    route = await instance.existing_route(DLQ_PREFIX + group)
    letters: list[MessageExt] = []
    if route is None:
        return letters
    for mq in route.read_queues:
        addr = route.masters[mq.broker_name]
        offset = await queue_offset(instance, addr, mq, RequestCode.GET_MIN_OFFSET)
        while len(letters) < limit:
            result = await pull(
                instance, addr, mq, TOOLS_GROUP, offset, max_messages=min(32, limit - len(letters))
            )
            letters += result.messages
            if result.status is not PullStatus.FOUND or result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset
    return letters[:limit]


async def resend_dead_letters(
    instance: ClientInstance, group: str, msg_ids: Iterable[str] | None = None, limit: int = 1000
) -> list[tuple[MessageExt, SendResult]]:
    """Send `group`'s dead letters (those with the given ids, message or offset ids; else all, up to
    `limit`) back to their original topics; return each with its send result."""
    wanted = set(msg_ids) if msg_ids is not None else None
    letters = [
        m for m in await list_dead_letters(instance, group, limit if wanted is None else 1 << 30)
        if wanted is None or m.msg_id in wanted or m.offset_msg_id in wanted
    ]  # fmt: skip
    if wanted is not None:
        missing = wanted - {m.msg_id for m in letters} - {m.offset_msg_id for m in letters}
        if missing:
            raise ClientError(f"no dead letter of group {group} has id {', '.join(sorted(missing))}")
    sent = []
    producer = Producer(RESEND_GROUP, "", instance=instance)
    await producer.start()
    try:
        for m in letters:
            topic = m.properties.get(Prop.RETRY_TOPIC, m.topic)
            props = {k: v for k, v in m.properties.items() if k not in _BOOKKEEPING}
            sent.append((m, await producer.send(Message(topic, m.body, properties=props, flag=m.flag))))
    finally:
        await producer.shutdown()
    return sent
