"""PushConsumer retries through the real broker: send-back, the retry topic, the DLQ, the fallbacks,
and the consume timeout."""

from __future__ import annotations

import asyncio

from ferrymq.client import Message
from ferrymq.client.push_consumer import ConsumeResult
from ferrymq.protocol.codes import RequestCode, ResponseCode

from .conftest import collect, eventually


class Flaky:
    """Fails (by raising, or answering RECONSUME_LATER) the first `failures` deliveries of each body."""

    def __init__(self, failures: int, how: str = "raise") -> None:
        self.failures = failures
        self.how = how
        self.seen: list = []

    async def __call__(self, messages):
        m = messages[0]
        self.seen.append(m)
        if sum(1 for s in self.seen if s.body == m.body) <= self.failures:
            if self.how == "raise":
                raise RuntimeError("listener failed")
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS


async def test_a_failed_message_comes_back_from_the_retry_topic_as_its_own_topic(
    cluster, producer, start_consumer
):
    await producer.send(Message("Work", b"job", tags="TagA"))
    listener = Flaky(failures=2)
    await start_consumer("workers", "Work", listener, consume_from="first")
    await eventually(lambda: len(listener.seen) == 3, what="two failures and a success")
    assert [m.reconsume_times for m in listener.seen] == [0, 1, 2]
    for m in listener.seen:
        assert m.topic == "Work" and m.body == b"job" and m.tags == "TagA"
    assert listener.seen[1].properties["RETRY_TOPIC"] == "Work"
    assert len({m.msg_id for m in listener.seen}) == 1
    await asyncio.sleep(1.5)  # a success is final: nothing comes back
    assert len(listener.seen) == 3


async def test_reconsume_later_climbs_to_the_dlq_after_max_reconsume_times(cluster, producer, start_consumer):
    await producer.send(Message("Doomed", b"never"))
    listener = Flaky(failures=100, how="later")
    await start_consumer("doomers", "Doomed", listener, consume_from="first", max_reconsume_times=2)
    [(_, dead)] = await collect(cluster.namesrv_addr, "%DLQ%doomers", 1, timeout=30)
    assert dead.body == b"never" and dead.properties["RETRY_TOPIC"] == "Doomed"
    assert [m.reconsume_times for m in listener.seen] == [0, 1, 2]


async def test_when_the_broker_refuses_send_back_the_retry_goes_by_a_plain_send(
    cluster, producer, start_consumer
):
    async def refuse(conn, request):
        return request.make_response(ResponseCode.SYSTEM_ERROR, "send-back is switched off here")

    cluster.broker.server.register(RequestCode.CONSUMER_SEND_MSG_BACK, refuse)
    await producer.send(Message("Fallback", b"fb"))
    listener = Flaky(failures=1)
    await start_consumer("fallers", "Fallback", listener, consume_from="first")
    await eventually(lambda: len(listener.seen) == 2, what="a redelivery")
    again = listener.seen[1]
    assert again.topic == "Fallback" and again.reconsume_times == 1
    assert again.properties["ORIGIN_MESSAGE_ID"] == listener.seen[0].msg_id


async def test_when_nothing_can_be_sent_back_the_message_is_consumed_again_here(
    cluster, producer, start_consumer
):
    await producer.send(Message("Local", b"here"))
    gate = asyncio.Event()
    listener = Flaky(failures=1)

    async def after_gate(messages):
        await gate.wait()
        return await listener(messages)

    await start_consumer("locals", "Local", after_gate, consume_from="first")
    # A read-only retry topic: the broker refuses the send-back, and the fallback send as well.
    ext = {"topic": "%RETRY%locals", "defaultTopic": "TBW102", "readQueueNums": 1, "writeQueueNums": 1,
           "perm": 4, "topicFilterType": "SINGLE_TAG"}  # fmt: skip
    assert (await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, ext)).code == ResponseCode.SUCCESS
    gate.set()
    await eventually(lambda: len(listener.seen) == 2, timeout=20, what="a local retry")
    assert listener.seen[1].reconsume_times == 1 and listener.seen[1].topic == "Local"


async def test_a_message_consumed_too_long_is_sent_back_and_redelivered(cluster, producer, start_consumer):
    release = asyncio.Event()
    seen = []

    async def hangs_first_time(messages):
        seen.append(messages[0])
        if len(seen) == 1:
            await release.wait()  # stuck far past the consume timeout
        return True

    await producer.send(Message("Slow", b"slow"))
    consumer = await start_consumer(
        "slowpokes", "Slow", hangs_first_time, consume_from="first", consume_timeout=0.02
    )  # 1.2 s
    try:
        await eventually(lambda: len(seen) == 2, timeout=20, what="the redelivery of the stuck message")
    finally:
        release.set()
    assert seen[1].body == b"slow" and seen[1].reconsume_times == 1
    mq = next(q for q in consumer.queues if q.topic == "Slow" and q.queue_id == seen[0].queue_id)
    await eventually(lambda: consumer.offsets.get(mq) == 1, what="the offset to pass the timed-out message")
    await asyncio.sleep(1.0)
    assert len(seen) == 2  # the stuck call's late success does not send it back again


async def test_consume_timeout_must_be_positive(cluster):
    import pytest

    from ferrymq.client.push_consumer import PushConsumer

    with pytest.raises(ValueError, match="consume_timeout"):
        PushConsumer("g", cluster.namesrv_addr, consume_timeout=0)
