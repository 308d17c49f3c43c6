"""PullMessage and the offset RPCs (UpdateOffset, GetOffset, QueryOffset) with our own stubs, against a
proxy over a broker in this process (local mode) and over remoting (cluster mode)."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.proxy.messages import queue_for_group
from ferrymq.proxy.v2 import messaging_pb2 as pb

from ..broker.conftest import make_cluster  # noqa: F401  (fixture)
from .test_rpcs import message, stub  # noqa: F401  (fixture)

GROUP = pb.Resource(name="Pullers")
GROUP_KEY = "g0"  # the message group every message here is sent with, so they share one queue


def orders_queue(queue_id: int = 0, topic: str = "Orders", broker: str = "broker-a") -> pb.MessageQueue:
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id, broker=pb.Broker(name=broker))


def group_queue() -> pb.MessageQueue:
    """The queue of Orders (two queues) that the proxy sends message group GROUP_KEY to."""
    return orders_queue(queue_for_group(GROUP_KEY, 2))


async def send(stub, *bodies: bytes, tag: str | None = None) -> None:  # noqa: F811
    for body in bodies:
        extra = {"tag": tag} if tag else {}
        sent = await stub.SendMessage(
            pb.SendMessageRequest(messages=[message(body, message_group=GROUP_KEY, **extra)])
        )
        assert sent.status.code == pb.OK, sent


async def pull(stub, offset: int, batch: int = 32, poll_s: float | None = None, **fields) -> list:  # noqa: F811
    request = pb.PullMessageRequest(group=GROUP, offset=offset, batch_size=batch, **fields)
    if "message_queue" not in fields:
        request.message_queue.CopyFrom(group_queue())
    if poll_s is not None:
        request.long_polling_timeout.FromMilliseconds(int(poll_s * 1000))
    return [r async for r in stub.PullMessage(request, timeout=30)]


async def test_a_pull_is_status_then_messages_then_the_next_offset(stub):  # noqa: F811
    mq = group_queue()
    await send(stub, b"a", b"b", b"c")
    frames = await pull(stub, 0, message_queue=mq)
    assert [f.WhichOneof("content") for f in frames] == [
        "status",
        "message",
        "message",
        "message",
        "next_offset",
    ]
    assert frames[0].status.code == pb.OK
    assert [f.message.body for f in frames[1:4]] == [b"a", b"b", b"c"]
    assert [f.message.system_properties.queue_offset for f in frames[1:4]] == [0, 1, 2]
    assert not frames[1].message.system_properties.receipt_handle
    assert frames[-1].next_offset == 3
    two = await pull(stub, 1, batch=2, message_queue=mq)
    assert [f.message.body for f in two if f.HasField("message")] == [b"b", b"c"] and two[-1].next_offset == 3
    empty = await pull(stub, 3, message_queue=mq)
    assert [f.WhichOneof("content") for f in empty] == ["status", "next_offset"]
    assert empty[0].status.code == pb.MESSAGE_NOT_FOUND and empty[1].next_offset == 3
    beyond = await pull(stub, 100, message_queue=mq)
    # corrected as RocketMQ's store does: to the first offset while the queue holds its first message
    assert beyond[0].status.code == pb.ILLEGAL_OFFSET and beyond[-1].next_offset == 0


async def test_a_pull_filters_by_tag(stub):  # noqa: F811
    mq = group_queue()
    await send(stub, b"x1", tag="x")
    await send(stub, b"y1", tag="y")
    frames = await pull(
        stub, 0, message_queue=mq, filter_expression=pb.FilterExpression(type=pb.TAG, expression="y")
    )
    assert [f.message.body for f in frames if f.HasField("message")] == [b"y1"]
    assert frames[-1].next_offset == 2


async def test_an_empty_pull_waits_for_a_message_up_to_its_long_polling_time(stub):  # noqa: F811
    mq = group_queue()
    started = time.monotonic()
    waiting = asyncio.ensure_future(pull(stub, 0, poll_s=15, message_queue=mq))
    await asyncio.sleep(0.5)
    assert not waiting.done()
    await send(stub, b"late")
    frames = await asyncio.wait_for(waiting, 10)
    assert frames[0].status.code == pb.OK
    assert [f.message.body for f in frames if f.HasField("message")] == [b"late"]
    assert time.monotonic() - started < 10  # woken by the message, not by the 15 s running out


async def test_offsets_are_updated_got_and_queried_by_policy(stub):  # noqa: F811
    mq = group_queue()
    before_ms = int(time.time() * 1000)
    await send(stub, b"1", b"2")

    async def query(policy: int, **fields) -> pb.QueryOffsetResponse:
        request = pb.QueryOffsetRequest(message_queue=mq, query_offset_policy=policy, **fields)  # type: ignore[arg-type]
        return await stub.QueryOffset(request)

    assert (await query(pb.BEGINNING)).offset == 0
    assert (await query(pb.END)).offset == 2
    at = await query(pb.TIMESTAMP, timestamp={"seconds": before_ms // 1000 + 3600})
    assert at.status.code == pb.OK and at.offset == 2
    old = await query(pb.TIMESTAMP, timestamp={"seconds": 0})
    assert old.offset == 0
    assert (await query(pb.TIMESTAMP)).status.code == pb.BAD_REQUEST

    got = await stub.GetOffset(
        pb.GetOffsetRequest(group=pb.Resource(name="Never"), message_queue=orders_queue(1 - mq.id))
    )
    # a group that never committed starts at 0 while the queue holds its first message (the broker's rule)
    assert (got.status.code, got.offset) == (pb.OK, 0)
    updated = await stub.UpdateOffset(pb.UpdateOffsetRequest(group=GROUP, message_queue=mq, offset=2))
    assert updated.status.code == pb.OK
    got = await stub.GetOffset(pb.GetOffsetRequest(group=GROUP, message_queue=mq))
    assert (got.status.code, got.offset) == (pb.OK, 2)
    for bad in (-1, 3):
        refused = await stub.UpdateOffset(pb.UpdateOffsetRequest(group=GROUP, message_queue=mq, offset=bad))
        assert refused.status.code == pb.ILLEGAL_OFFSET
    assert (await stub.GetOffset(pb.GetOffsetRequest(group=GROUP, message_queue=mq))).offset == 2


@pytest.mark.parametrize(
    "queue, group, code",
    [
        (orders_queue(topic="Nope"), "G", pb.TOPIC_NOT_FOUND),
        (orders_queue(topic=""), "G", pb.ILLEGAL_TOPIC),
        (orders_queue(7), "G", pb.BAD_REQUEST),
        (orders_queue(broker="broker-z"), "G", pb.BAD_REQUEST),
        (orders_queue(), "", pb.ILLEGAL_CONSUMER_GROUP),
    ],
)
async def test_pulls_and_offsets_of_a_bad_queue_or_group_are_refused(stub, queue, group, code):  # noqa: F811
    resource = pb.Resource(name=group)
    frames = [
        r
        async for r in stub.PullMessage(
            pb.PullMessageRequest(group=resource, message_queue=queue, offset=0, batch_size=1), timeout=10
        )
    ]
    assert [f.status.code for f in frames] == [code]
    assert (
        await stub.GetOffset(pb.GetOffsetRequest(group=resource, message_queue=queue))
    ).status.code == code
    update = pb.UpdateOffsetRequest(group=resource, message_queue=queue, offset=0)
    assert (await stub.UpdateOffset(update)).status.code == code


@pytest.mark.parametrize(
    "fields, code", [({"batch_size": 0}, pb.BAD_REQUEST), ({"offset": -1}, pb.ILLEGAL_OFFSET)]
)
async def test_a_bad_pull_is_refused_in_its_status(stub, fields, code):  # noqa: F811
    request = pb.PullMessageRequest(group=GROUP, message_queue=orders_queue(), offset=0, batch_size=1)
    for key, value in fields.items():
        setattr(request, key, value)
    frames = [r async for r in stub.PullMessage(request, timeout=10)]
    assert [f.status.code for f in frames] == [code]
