"""RecallMessage through the proxy: a delayed message's send answers a recall handle, which cancels it
before it is due; refusals answer the codes RocketMQ's proxy answers."""

from __future__ import annotations

import time

from ferrymq.proxy.v2 import messaging_pb2 as pb

from ..broker.conftest import make_cluster  # noqa: F401  (fixture)
from .test_message_types import typed  # noqa: F401  (fixture)
from .test_rpcs import message, receive, stub  # noqa: F401  (fixture)


def delayed(body: bytes, message_id: str, due_ms: int) -> pb.Message:
    m = message(body, message_id=message_id)
    m.system_properties.delivery_timestamp.FromMilliseconds(due_ms)
    return m


async def recall(stub, topic: str, handle: str) -> pb.RecallMessageResponse:  # noqa: F811
    return await stub.RecallMessage(
        pb.RecallMessageRequest(topic=pb.Resource(name=topic), recall_handle=handle)
    )


async def test_a_recalled_message_is_never_delivered_and_its_neighbour_is(stub):  # noqa: F811
    due_ms = int(time.time() * 1000) + 2_000
    sent = await stub.SendMessage(
        pb.SendMessageRequest(messages=[delayed(b"recalled", "r-1", due_ms), delayed(b"kept", "k-1", due_ms)])
    )
    assert [e.status.code for e in sent.entries] == [pb.OK, pb.OK]
    handles = [e.recall_handle for e in sent.entries]
    assert all(handles) and handles[0] != handles[1]
    now = await stub.SendMessage(pb.SendMessageRequest(messages=[message(b"now")]))
    assert now.entries[0].recall_handle == ""
    recalled = await recall(stub, "Orders", handles[0])
    assert (recalled.status.code, recalled.message_id) == (pb.OK, "r-1")
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while b"kept" not in got and time.monotonic() < deadline:
        frames = await receive(stub, "Recallers")
        got += [f.message.body for f in frames if f.HasField("message")]
    assert sorted(got) == [b"kept", b"now"]
    late = await recall(stub, "Orders", handles[1])  # delivered: due already
    assert late.status.code == pb.INTERNAL_SERVER_ERROR and "due" in late.status.message


async def test_recall_refusals(typed):  # noqa: F811
    due_ms = int(time.time() * 1000) + 60_000
    sent = await typed.SendMessage(pb.SendMessageRequest(messages=[delayed(b"x", "x-1", due_ms)]))
    handle = sent.entries[0].recall_handle
    assert (await recall(typed, "Plain", handle)).status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert (await recall(typed, "Nope", handle)).status.code == pb.TOPIC_NOT_FOUND
    assert (await recall(typed, "", handle)).status.code == pb.ILLEGAL_TOPIC
    for bad in ("", "not a handle", handle[:-4]):
        refused = await recall(typed, "Orders", bad)
        assert refused.status.code == pb.INTERNAL_SERVER_ERROR and "invalid" in refused.status.message, bad
    other = await recall(typed, "OnlyDELAY", handle)  # a handle of another topic
    assert other.status.code == pb.INTERNAL_SERVER_ERROR and "topic" in other.status.message
