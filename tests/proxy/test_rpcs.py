"""The proxy's RPCs called with our own stubs, against a broker in this process (local mode) and over
remoting (cluster mode): the refusals and edge cases a client library does not easily produce."""

from __future__ import annotations

import gzip
import socket

import grpc
import pytest

from ferrymq.messaging.local import LocalMessageService
from ferrymq.messaging.remote import RemoteMessageService
from ferrymq.protocol.bodies import TopicConfig
from ferrymq.proxy.renewal import Renewals
from ferrymq.proxy.server import ProxyServer
from ferrymq.proxy.v2 import messaging_pb2 as pb
from ferrymq.proxy.v2 import messaging_pb2_grpc as pb_grpc

from ..broker.conftest import Cluster, make_cluster  # noqa: F401  (fixture)

CLIENT = (("x-mq-client-id", "test-client"),)


@pytest.fixture(params=["local", "cluster"])
async def stub(request, make_cluster):  # noqa: F811
    """A MessagingService stub to a proxy on a free port, over a broker with topic Orders (2 queues,
    every message type)."""
    cluster: Cluster = await make_cluster()
    broker = cluster.broker
    broker.topics.put(TopicConfig("Orders", 2, 2, 6, attributes={"message.type": "MIXED"}))
    await broker.registrar.register_all()
    if request.param == "local":
        name = broker.config.broker_name
        service = LocalMessageService(
            broker.puts, broker.reads, broker.pops, broker.topics, name, broker.transactions, broker.recalls
        )
        remote = None
    else:
        service = remote = await RemoteMessageService(cluster.namesrv_addr).start()
    # auto-renew at test speed: 2 s invisible, renewed when within 1.5 s of its end
    renewals = Renewals(service, invisible_ms=2_000, ahead_ms=1_500, interval_s=0.2)
    server = ProxyServer(service, "127.0.0.1", 0, renewals=renewals)
    port = await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        stub = pb_grpc.MessagingServiceStub(channel)
        stub.renewals = renewals  # type: ignore[attr-defined]  # for the renewal test to look at
        stub.cluster = cluster  # type: ignore[attr-defined]  # for tests that add topics
        stub.mode = request.param  # type: ignore[attr-defined]
        yield stub
    finally:
        await channel.close()
        await server.close()
        if remote is not None:
            await remote.close()


def message(body: bytes = b"hello", topic: str = "Orders", **system) -> pb.Message:
    m = pb.Message(body=body, topic=pb.Resource(name=topic))
    for key, value in system.items():
        setattr(m.system_properties, key, value)
    return m


async def receive(stub, group: str, batch: int = 32, invisible_s: int = 30, **extra) -> list:
    request = pb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name="Orders")),
        batch_size=batch, **extra,
    )  # fmt: skip
    request.invisible_duration.FromSeconds(invisible_s)
    request.long_polling_timeout.FromSeconds(5)
    return [r async for r in stub.ReceiveMessage(request, metadata=CLIENT, timeout=30)]


async def test_query_route_names_the_proxy_as_every_queue_endpoint(stub):
    reply = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="Orders")))
    assert reply.status.code == pb.OK
    assert [(q.id, q.permission, q.broker.name) for q in reply.message_queues] == [
        (0, pb.READ_WRITE, "broker-a"), (1, pb.READ_WRITE, "broker-a"),
    ]  # fmt: skip
    (address,) = reply.message_queues[0].broker.endpoints.addresses
    assert address.host == "127.0.0.1" and address.port > 0
    missing = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="Nope")))
    assert missing.status.code == pb.TOPIC_NOT_FOUND and not missing.message_queues


async def test_query_assignment_gives_one_any_queue_assignment_per_broker(stub):
    reply = await stub.QueryAssignment(
        pb.QueryAssignmentRequest(topic=pb.Resource(name="Orders"), group=pb.Resource(name="G"))
    )
    assert reply.status.code == pb.OK
    assert [(a.message_queue.id, a.message_queue.broker.name) for a in reply.assignments] == [
        (-1, "broker-a")
    ]


async def test_a_send_answers_per_message_and_multiple_results_when_they_differ(stub):
    reserved = message(message_id="id-2")
    reserved.user_properties["TAGS"] = "sneaky"
    request = pb.SendMessageRequest(
        messages=[message(message_id="id-1", tag="a"), reserved, message(b"", message_id="id-3")]
    )
    reply = await stub.SendMessage(request)
    assert reply.status.code == pb.MULTIPLE_RESULTS
    assert [(e.message_id, e.status.code) for e in reply.entries] == [
        ("id-1", pb.OK), ("id-2", pb.ILLEGAL_MESSAGE_PROPERTY_KEY), ("id-3", pb.MESSAGE_BODY_EMPTY),
    ]  # fmt: skip
    assert reply.entries[0].offset == 0
    mixed = await stub.SendMessage(pb.SendMessageRequest(messages=[message(), message(topic="Other")]))
    assert mixed.status.code == pb.MESSAGE_CORRUPTED
    unknown = await stub.SendMessage(pb.SendMessageRequest(messages=[message(topic="Nope")]))
    assert unknown.status.code == pb.TOPIC_NOT_FOUND


async def test_the_plain_messages_of_a_send_are_stored_together_in_one_queue(stub):
    grouped = message(b"g", message_id="g1", message_group="G1")
    plain = [message(b"p%d" % i, message_id=f"p{i}") for i in range(4)]
    reply = await stub.SendMessage(pb.SendMessageRequest(messages=[plain[0], grouped, *plain[1:]]))
    assert reply.status.code == pb.OK
    assert [e.message_id for e in reply.entries] == ["p0", "g1", "p1", "p2", "p3"]
    offsets = [e.offset for e in reply.entries if e.message_id.startswith("p")]
    assert offsets == list(range(offsets[0], offsets[0] + 4))  # one batch: consecutive in one queue
    frames = await receive(stub, "Batched")
    got = {f.message.system_properties.message_id: f.message for f in frames if f.HasField("message")}
    assert sorted(got) == ["g1", "p0", "p1", "p2", "p3"]
    assert len({got[f"p{i}"].system_properties.queue_id for i in range(4)}) == 1
    assert got["p3"].body == b"p3" and got["g1"].system_properties.message_group == "G1"


async def test_a_gzip_body_is_received_as_its_content(stub):
    sent = await stub.SendMessage(
        pb.SendMessageRequest(messages=[message(gzip.compress(b"z" * 5000), body_encoding=pb.GZIP)])
    )
    assert sent.status.code == pb.OK
    frames = await receive(stub, "Unzip")
    assert frames[0].status.code == pb.OK
    (got,) = [f.message for f in frames if f.HasField("message")]
    assert got.body == b"z" * 5000 and got.system_properties.body_encoding == pb.IDENTITY


async def test_a_receive_is_status_then_messages_then_the_delivery_time(stub):
    await stub.SendMessage(
        pb.SendMessageRequest(messages=[message(b"m%d" % i, message_id=f"id{i}") for i in range(3)])
    )
    frames = await receive(stub, "Readers")
    kinds = [f.WhichOneof("content") for f in frames]
    assert kinds == ["status", "message", "message", "message", "delivery_timestamp"]
    assert frames[0].status.code == pb.OK
    messages = [f.message for f in frames[1:4]]
    assert sorted(m.system_properties.message_id for m in messages) == ["id0", "id1", "id2"]
    assert all(m.system_properties.invisible_duration.ToSeconds() == 30 for m in messages)
    acked = await stub.AckMessage(
        pb.AckMessageRequest(
            group=pb.Resource(name="Readers"), topic=pb.Resource(name="Orders"),
            entries=[
                pb.AckMessageEntry(message_id=m.system_properties.message_id,
                                   receipt_handle=m.system_properties.receipt_handle)
                for m in messages
            ] + [pb.AckMessageEntry(message_id="x", receipt_handle="not a handle")],
        )
    )  # fmt: skip
    assert acked.status.code == pb.MULTIPLE_RESULTS
    assert [e.status.code for e in acked.entries] == [pb.OK, pb.OK, pb.OK, pb.INVALID_RECEIPT_HANDLE]
    empty = await receive(stub, "Readers")
    assert [f.status.code for f in empty] == [pb.MESSAGE_NOT_FOUND]


@pytest.mark.parametrize(
    "changes, code",
    [
        ({"batch": 0}, pb.BAD_REQUEST),
        ({"batch": 33}, pb.BAD_REQUEST),
        ({"invisible_s": 5}, pb.ILLEGAL_INVISIBLE_TIME),
        ({"invisible_s": 13 * 3600}, pb.ILLEGAL_INVISIBLE_TIME),
    ],
)
async def test_a_bad_receive_is_refused_in_its_status(stub, changes, code):
    frames = await receive(stub, "G", **changes)
    assert [f.status.code for f in frames] == [code]


async def test_change_invisible_duration_replaces_the_handle(stub):
    await stub.SendMessage(pb.SendMessageRequest(messages=[message(message_id="c1")]))
    (m,) = [f.message for f in await receive(stub, "Changers") if f.HasField("message")]
    old = m.system_properties.receipt_handle
    request = pb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="Changers"), topic=pb.Resource(name="Orders"), receipt_handle=old,
        message_id="c1",
    )  # fmt: skip
    request.invisible_duration.FromSeconds(60)
    changed = await stub.ChangeInvisibleDuration(request)
    assert changed.status.code == pb.OK and changed.receipt_handle not in ("", old)
    again = await stub.ChangeInvisibleDuration(request)  # the old handle is no longer current
    assert again.status.code == pb.INVALID_RECEIPT_HANDLE
    stale = await stub.AckMessage(
        pb.AckMessageRequest(
            group=pb.Resource(name="Changers"), topic=pb.Resource(name="Orders"),
            entries=[pb.AckMessageEntry(message_id="c1", receipt_handle=old)],
        )
    )  # fmt: skip
    assert stale.status.code == pb.INVALID_RECEIPT_HANDLE


async def test_a_message_forwarded_to_the_dead_letter_queue_is_settled(stub):
    await stub.SendMessage(pb.SendMessageRequest(messages=[message(message_id="d1")]))
    (m,) = [f.message for f in await receive(stub, "Quitters") if f.HasField("message")]
    request = pb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name="Quitters"), topic=pb.Resource(name="Orders"), message_id="d1",
        receipt_handle=m.system_properties.receipt_handle, delivery_attempt=1, max_delivery_attempts=1,
    )  # fmt: skip
    assert (await stub.ForwardMessageToDeadLetterQueue(request)).status.code == pb.OK
    again = await stub.ForwardMessageToDeadLetterQueue(request)  # settled: the handle is spent
    assert again.status.code == pb.INVALID_RECEIPT_HANDLE
    blank = await stub.ForwardMessageToDeadLetterQueue(pb.ForwardMessageToDeadLetterQueueRequest())
    assert blank.status.code == pb.ILLEGAL_CONSUMER_GROUP


async def test_telemetry_answers_settings_with_the_merged_ones(stub):
    settings = pb.Settings(client_type=pb.SIMPLE_CONSUMER)
    settings.subscription.group.name = "G"

    async def commands():
        yield pb.TelemetryCommand(settings=settings)

    call = stub.Telemetry(commands(), metadata=CLIENT, timeout=10)
    answers = [a async for a in call]
    assert len(answers) == 1 and answers[0].status.code == pb.OK
    merged = answers[0].settings
    assert merged.subscription.group.name == "G" and merged.subscription.receive_batch_size == 32
    assert merged.backoff_policy.customized_backoff.next


async def test_a_half_message_shows_once_its_transaction_commits(stub):
    sent = await stub.SendMessage(
        pb.SendMessageRequest(
            messages=[message(b"paid", message_id="t1", message_type=pb.TRANSACTION),
                      message(b"void", message_id="t2", message_type=pb.TRANSACTION)]
        )
    )  # fmt: skip
    assert [e.status.code for e in sent.entries] == [pb.OK, pb.OK]
    ids = [e.transaction_id for e in sent.entries]
    assert all(ids)
    assert [f.status.code for f in await receive(stub, "Accountants")] == [pb.MESSAGE_NOT_FOUND]

    async def end(transaction_id: str, message_id: str, resolution: int) -> int:
        request = pb.EndTransactionRequest(
            topic=pb.Resource(name="Orders"), message_id=message_id, transaction_id=transaction_id,
            resolution=resolution, source=pb.SOURCE_CLIENT,  # type: ignore[arg-type]
        )  # fmt: skip
        return (await stub.EndTransaction(request)).status.code

    assert await end(ids[0], "t1", pb.COMMIT) == pb.OK
    assert await end(ids[1], "t2", pb.ROLLBACK) == pb.OK
    assert await end("not an id", "t3", pb.COMMIT) == pb.INVALID_TRANSACTION_ID
    frames = await receive(stub, "Accountants")
    assert [f.message.body for f in frames if f.HasField("message")] == [b"paid"]


async def test_unserved_calls_answer_unimplemented(stub):
    with pytest.raises(grpc.aio.AioRpcError) as lite:
        await stub.SyncLiteSubscription(pb.SyncLiteSubscriptionRequest())
    assert lite.value.code() == grpc.StatusCode.UNIMPLEMENTED
    beat = await stub.Heartbeat(pb.HeartbeatRequest(client_type=pb.PRODUCER))
    assert beat.status.code == pb.OK


async def test_a_port_in_use_is_a_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            await ProxyServer(None, "127.0.0.1", port).start()  # type: ignore[arg-type]  # never reached


async def test_a_tag_filter_hands_out_only_its_tags_even_when_hash_codes_collide(stub):
    # "Aa" and "BB" share their Java hash code, which is all a consume queue keeps of a tag
    await stub.SendMessage(
        pb.SendMessageRequest(messages=[message(b"%d" % i, tag=("Aa", "BB")[i % 2]) for i in range(4)])
    )
    request_filter = pb.FilterExpression(type=pb.TAG, expression="Aa")
    frames = await receive(stub, "Picky", filter_expression=request_filter)
    assert sorted(f.message.body for f in frames if f.HasField("message")) == [b"0", b"2"]
    assert {f.message.system_properties.tag for f in frames if f.HasField("message")} == {"Aa"}


async def test_an_auto_renew_receive_stays_invisible_and_acks_with_the_handle_first_given(stub):
    await stub.SendMessage(pb.SendMessageRequest(messages=[message(b"slow work", message_id="r1")]))
    frames = await receive(stub, "Slowpokes", auto_renew=True)
    (m,) = [f.message for f in frames if f.HasField("message")]
    assert m.system_properties.invisible_duration.ToMilliseconds() == 2_000
    first = m.system_properties.receipt_handle
    # 5 s of long polling, well past the 2 s invisible time: renewed meanwhile, it does not come back
    assert [f.status.code for f in await receive(stub, "Slowpokes", auto_renew=True)] == [
        pb.MESSAGE_NOT_FOUND
    ]
    acked = await stub.AckMessage(
        pb.AckMessageRequest(
            group=pb.Resource(name="Slowpokes"), topic=pb.Resource(name="Orders"),
            entries=[pb.AckMessageEntry(message_id="r1", receipt_handle=first)],
        )
    )  # fmt: skip
    assert acked.status.code == pb.OK
    assert len(stub.renewals) == 0


async def test_messages_of_a_terminated_client_are_renewed_no_more_and_come_back(stub):
    await stub.SendMessage(pb.SendMessageRequest(messages=[message(b"orphan", message_id="o1")]))
    frames = await receive(stub, "Leavers", auto_renew=True)
    assert [f.message.body for f in frames if f.HasField("message")] == [b"orphan"]
    assert len(stub.renewals) == 1
    request = pb.NotifyClientTerminationRequest(group=pb.Resource(name="Leavers"))
    assert (await stub.NotifyClientTermination(request, metadata=CLIENT)).status.code == pb.OK
    assert len(stub.renewals) == 0
    back = [f.message for f in await receive(stub, "Leavers") if f.HasField("message")]
    assert [(m.body, m.system_properties.delivery_attempt) for m in back] == [(b"orphan", 2)]


async def test_a_cluster_out_of_reach_is_an_error_status_not_a_hang():
    remote = await RemoteMessageService("127.0.0.1:1", request_timeout=1.0).start()
    server = ProxyServer(remote, "127.0.0.1", 0)
    port = await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.MessagingServiceStub(channel)
            route = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="Orders")), timeout=10)
            assert route.status.code == pb.INTERNAL_SERVER_ERROR, route
            sent = await stub.SendMessage(pb.SendMessageRequest(messages=[message()]), timeout=10)
            assert sent.status.code == pb.INTERNAL_SERVER_ERROR, sent
    finally:
        await server.close()
        await remote.close()
