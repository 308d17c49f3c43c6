"""Clear errors: each refusal answers gRPC OK with the v2 Status.code RocketMQ's proxy answers (and a
message saying why), never a stack trace or a stream left hanging."""

from __future__ import annotations

import time

import pytest

from ferrymq.proxy.v2 import messaging_pb2 as pb

from ..broker.conftest import make_cluster  # noqa: F401  (fixture)
from .test_rpcs import CLIENT, message, receive, stub  # noqa: F401  (fixture)

ORDERS = pb.Resource(name="Orders")


def receive_request(group: str = "G", topic: str = "Orders", **fields) -> pb.ReceiveMessageRequest:
    queue = pb.MessageQueue(topic=pb.Resource(name=topic))
    request = pb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=queue, batch_size=1, **fields
    )
    if "invisible_duration" not in fields:
        request.invisible_duration.FromSeconds(30)
    if "long_polling_timeout" not in fields:
        request.long_polling_timeout.FromSeconds(5)
    return request


async def statuses(stub, request: pb.ReceiveMessageRequest, timeout: float = 30) -> list[int]:  # noqa: F811
    return [r.status.code async for r in stub.ReceiveMessage(request, metadata=CLIENT, timeout=timeout)]


async def test_an_unknown_topic_is_topic_not_found_everywhere(stub):  # noqa: F811
    nope = pb.Resource(name="Nope")
    assert (await stub.QueryRoute(pb.QueryRouteRequest(topic=nope))).status.code == pb.TOPIC_NOT_FOUND
    assignment = await stub.QueryAssignment(
        pb.QueryAssignmentRequest(topic=nope, group=pb.Resource(name="G"))
    )
    assert assignment.status.code == pb.TOPIC_NOT_FOUND
    sent = await stub.SendMessage(pb.SendMessageRequest(messages=[message(topic="Nope")]))
    assert sent.status.code == pb.TOPIC_NOT_FOUND and "Nope" in sent.status.message
    assert await statuses(stub, receive_request(topic="Nope")) == [pb.TOPIC_NOT_FOUND]


async def test_a_topic_name_no_broker_could_hold_is_illegal_topic(stub):  # noqa: F811
    bad = pb.Resource(name="no spaces")
    route = await stub.QueryRoute(pb.QueryRouteRequest(topic=bad))
    assert route.status.code == pb.ILLEGAL_TOPIC and "may only contain" in route.status.message
    queue = pb.MessageQueue(topic=bad, id=0, broker=pb.Broker(name="broker-a"))
    offset = await stub.QueryOffset(pb.QueryOffsetRequest(message_queue=queue, query_offset_policy=pb.END))
    assert offset.status.code == pb.ILLEGAL_TOPIC


async def test_an_unknown_group_is_consumer_group_not_found_when_groups_are_not_created(stub):  # noqa: F811
    stub.cluster.broker.groups.auto_create = False
    assert await statuses(stub, receive_request(group="Stranger")) == [pb.CONSUMER_GROUP_NOT_FOUND]


async def test_a_body_over_the_broker_s_limit_is_message_body_too_large(stub):  # noqa: F811
    sent = await stub.SendMessage(pb.SendMessageRequest(messages=[message(b"x" * (4 * 1024 * 1024 + 1))]))
    assert sent.status.code == pb.MESSAGE_BODY_TOO_LARGE
    assert sent.entries[0].status.code == pb.MESSAGE_BODY_TOO_LARGE and "4194304" in sent.status.message
    if stub.mode == "local":  # the proxy in the broker's process follows the broker's max_message_size
        stub.cluster.broker.store.config.max_message_size = 1000
        sent = await stub.SendMessage(
            pb.SendMessageRequest(messages=[message(b"x" * 1001), message(b"x" * 1000)])
        )
        assert [e.status.code for e in sent.entries] == [pb.MESSAGE_BODY_TOO_LARGE, pb.OK]


@pytest.mark.parametrize(
    "messages, code",
    [
        ([], pb.MESSAGE_CORRUPTED),  # no message
        ([message(topic="")], pb.ILLEGAL_TOPIC),
        ([message(topic="no spaces")], pb.ILLEGAL_TOPIC),
        ([message(topic="t" * 128)], pb.ILLEGAL_TOPIC),
        ([message(), message(topic="Other")], pb.MESSAGE_CORRUPTED),  # topics differ
        ([message(b"")], pb.MESSAGE_BODY_EMPTY),
        ([message(tag=" ")], pb.ILLEGAL_MESSAGE_TAG),
        ([message(tag="a|b")], pb.ILLEGAL_MESSAGE_TAG),
        ([message(b"not gzip", body_encoding=pb.GZIP)], pb.MESSAGE_CORRUPTED),
    ],
)
async def test_a_malformed_send_is_refused(stub, messages, code):  # noqa: F811
    sent = await stub.SendMessage(pb.SendMessageRequest(messages=messages))
    assert sent.status.code == code, sent
    assert sent.status.message


@pytest.mark.parametrize(
    "request_, code",
    [
        (receive_request(group=""), pb.ILLEGAL_CONSUMER_GROUP),
        (receive_request(topic=""), pb.ILLEGAL_TOPIC),
        (receive_request(invisible_duration={"seconds": -5}), pb.ILLEGAL_INVISIBLE_TIME),
        (receive_request(filter_expression=pb.FilterExpression(type=pb.SQL, expression="a >")),
         pb.ILLEGAL_FILTER_EXPRESSION),
        (receive_request(filter_expression=pb.FilterExpression(type=pb.SQL, expression="")),
         pb.ILLEGAL_FILTER_EXPRESSION),
    ],
)  # fmt: skip
async def test_a_malformed_receive_is_refused_in_its_status(stub, request_, code):  # noqa: F811
    stub.cluster.broker.filters.enable_property_filter = True
    assert await statuses(stub, request_) == [code]


async def test_an_sql92_filter_while_the_broker_has_them_off_is_refused_saying_so(stub):  # noqa: F811
    request = receive_request(filter_expression=pb.FilterExpression(type=pb.SQL, expression="a > 1"))
    frames = [r async for r in stub.ReceiveMessage(request, metadata=CLIENT, timeout=30)]
    assert [f.status.code for f in frames] == [pb.INTERNAL_SERVER_ERROR]  # as RocketMQ's proxy answers
    assert "SQL92" in frames[0].status.message or "property" in frames[0].status.message


async def test_bad_receipt_handles_and_invisible_durations_are_refused(stub):  # noqa: F811
    for handle in ("", "not a handle", "1 2 3 4 5 6 7 8"):
        acked = await stub.AckMessage(
            pb.AckMessageRequest(
                group=pb.Resource(name="G"), topic=ORDERS,
                entries=[pb.AckMessageEntry(message_id="m", receipt_handle=handle)],
            )
        )  # fmt: skip
        assert acked.status.code == pb.INVALID_RECEIPT_HANDLE, handle
        change = pb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="G"), topic=ORDERS, receipt_handle=handle, message_id="m"
        )
        change.invisible_duration.FromSeconds(10)
        assert (await stub.ChangeInvisibleDuration(change)).status.code == pb.INVALID_RECEIPT_HANDLE, handle
    negative = pb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="G"), topic=ORDERS, receipt_handle="x"
    )
    negative.invisible_duration.FromSeconds(-1)
    assert (await stub.ChangeInvisibleDuration(negative)).status.code == pb.ILLEGAL_INVISIBLE_TIME
    no_entries = await stub.AckMessage(pb.AckMessageRequest(group=pb.Resource(name="G"), topic=ORDERS))
    assert no_entries.status.code == pb.BAD_REQUEST
    blank = await stub.AckMessage(pb.AckMessageRequest(topic=ORDERS))
    assert blank.status.code == pb.ILLEGAL_CONSUMER_GROUP


async def test_a_client_that_never_sent_settings_is_served_with_the_defaults(stub):  # noqa: F811
    """No Telemetry stream, no long polling time in the request: the default poll, cut to the call's
    deadline, answers in time instead of hanging."""
    await stub.Heartbeat(pb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER), metadata=CLIENT)
    request = receive_request(group="Unset")
    request.ClearField("long_polling_timeout")
    started = time.monotonic()
    assert await statuses(stub, request, timeout=7) == [pb.MESSAGE_NOT_FOUND]
    assert time.monotonic() - started < 7
    assert await statuses(stub, request, timeout=3) == [pb.ILLEGAL_POLLING_TIME]  # too little time to poll
