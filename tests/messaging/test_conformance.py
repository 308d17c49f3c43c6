"""One behaviour for both message services: the local one inside a broker started in this process,
and the remote one over remoting to a NameServer and broker on loopback ports. Every test runs
against both, so a front built on either sees the same rules."""

from __future__ import annotations

import asyncio
import inspect
import time

import pytest

from ferrymq.messaging.api import MessageQueue, MessageService, MessagingError, ReadOutcome
from ferrymq.messaging.local import LocalMessageService
from ferrymq.messaging.remote import RemoteMessageService
from ferrymq.protocol.batch import encode_batch
from ferrymq.protocol.bodies import SubscriptionGroupConfig, TopicConfig
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.message_ext import decode_records
from ferrymq.protocol.pop import INIT_MODE_MIN, POP_CK
from ferrymq.protocol.properties import Prop, encode_properties

from ..broker.conftest import Cluster, make_cluster  # noqa: F401  (fixture)

PERM_READ, PERM_WRITE = 4, 2
PREPARED = 0x4  # sys flag of a half message (TRANSACTION_PREPARED_TYPE)


@pytest.fixture(params=["local", "remote"])
async def served(request, make_cluster):  # noqa: F811
    """(cluster, service) for one implementation of the message service."""
    cluster: Cluster = await make_cluster()
    broker = cluster.broker
    if request.param == "local":
        name = broker.config.broker_name
        local = LocalMessageService(
            broker.puts,
            broker.reads,
            broker.pops,
            broker.topics,
            name,
            broker.transactions,
            broker.recalls,
            topic_admin=broker.topic_admin,
        )
        yield cluster, local
    else:
        async with RemoteMessageService(cluster.namesrv_addr) as remote:
            yield cluster, remote


async def make_topic(cluster: Cluster, topic: str, queues: int = 2, perm: int = PERM_READ | PERM_WRITE):
    """A topic on the broker, known to the NameServer before the test goes on."""
    cluster.broker.topics.put(TopicConfig(topic, queues, queues, perm))
    await cluster.broker.registrar.register_all()


def queue(cluster: Cluster, topic: str, queue_id: int = 0) -> MessageQueue:
    return MessageQueue(topic=topic, broker_name=cluster.broker.config.broker_name, queue_id=queue_id)


def tagged(tag: str, **more: str) -> str:
    return encode_properties({Prop.TAGS: tag, **more})


def bodies(outcome: ReadOutcome) -> list[bytes]:
    assert outcome.code == ResponseCode.SUCCESS, outcome
    return [m.body for m in decode_records(outcome.body())]


async def test_send_one_and_read_it_back(served):
    cluster, service = served
    await make_topic(cluster, "Orders")
    mq = queue(cluster, "Orders", 1)
    sent = await service.send("Orders", b"hello", tagged("new", KEYS="o-1"), queue=mq)
    assert sent.stored and sent.code == ResponseCode.SUCCESS, sent
    assert (sent.broker_name, sent.queue_id, sent.queue_offset) == (mq.broker_name, 1, 0)
    assert len(sent.msg_id) == 32
    await cluster.settled()
    got = await service.read("G", mq, 0)
    assert bodies(got) == [b"hello"]
    assert (got.next_begin_offset, got.min_offset, got.max_offset) == (1, 0, 1)
    assert (await service.read("G", mq, 1)).code == ResponseCode.PULL_NOT_FOUND


async def test_a_batch_is_stored_in_order_in_one_queue(served):
    cluster, service = served
    await make_topic(cluster, "Batches")
    mq = queue(cluster, "Batches", 0)
    body = encode_batch([(b"m%d" % i, tagged("b").encode(), 0) for i in range(3)])
    sent = await service.send_batch("Batches", body, queue=mq)
    assert sent.code == ResponseCode.SUCCESS and sent.queue_offset == 0, sent
    assert len(sent.msg_id.split(",")) == 3
    await cluster.settled()
    assert bodies(await service.read("G", mq, 0)) == [b"m0", b"m1", b"m2"]


async def test_a_new_topic_is_created_by_its_first_send(served):
    cluster, service = served
    sent = await service.send("Fresh", b"first")
    assert sent.code == ResponseCode.SUCCESS, sent
    assert cluster.broker.topics.get("Fresh") is not None
    await cluster.broker.registrar.register_all()
    route = await service.route("Fresh")
    assert route is not None and [q.broker_name for q in route] == [cluster.broker.config.broker_name]
    assert await service.route("NeverSent") is None


async def test_a_created_topic_is_served_at_once_and_a_deleted_one_is_gone_with_its_messages(served):
    cluster, service = served
    await service.create_topic("created", 1)
    assert [q.read_queue_nums for q in await service.route("created") or []] == [1]
    sent = await service.send("created", b"kept until the topic goes")
    assert sent.code == ResponseCode.SUCCESS, sent
    await service.delete_topic("created")
    assert cluster.broker.topics.get("created") is None
    assert cluster.broker.store.get_max_offset("created", 0) == 0
    await service.delete_topic("created")  # an absent topic is no error


async def test_read_filters_by_tag_and_by_sql92(served):
    cluster, service = served
    cluster.broker.filters.enable_property_filter = True
    await make_topic(cluster, "Tagged", 1)
    mq = queue(cluster, "Tagged")
    for i, tag in enumerate("ABAB"):
        sent = await service.send("Tagged", b"%s%d" % (tag.encode(), i), tagged(tag, n=str(i)), queue=mq)
        assert sent.stored
    await cluster.settled()
    assert bodies(await service.read("G", mq, 0, expression="A")) == [b"A0", b"A2"]
    assert bodies(await service.read("G", mq, 0, expression="A || B")) == [b"A0", b"B1", b"A2", b"B3"]
    sql = await service.read("G", mq, 0, expression="n > 1", expression_type="SQL92")
    assert bodies(sql) == [b"A2", b"B3"]
    bad = await service.read("G", mq, 0, expression="n >", expression_type="SQL92")
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "SQL92" in bad.remark


async def test_a_held_read_wakes_up_when_a_message_arrives(served):
    cluster, service = served
    await make_topic(cluster, "Waiting", 1)
    mq = queue(cluster, "Waiting")
    started = time.monotonic()
    held = asyncio.create_task(service.read("G", mq, 0, suspend_ms=20_000))
    async with asyncio.timeout(10):
        while cluster.broker.hold.waiting() == 0:  # the broker holds it (and nothing answered it)
            assert not held.done(), held.result()
            await asyncio.sleep(0.01)
        assert (await service.send("Waiting", b"late", queue=mq)).stored
        got = await held
    assert bodies(got) == [b"late"]
    assert time.monotonic() - started < 10  # woken by the message, not by the 20 s hold running out


async def test_offsets_are_committed_queried_and_carried_by_reads(served):
    cluster, service = served
    await make_topic(cluster, "Progress", 1)
    mq = queue(cluster, "Progress")
    assert await service.query_offset("G", mq) == 0  # a new group starts at a queue's first message
    for i in range(3):
        assert (await service.send("Progress", b"%d" % i, queue=mq)).stored
    await service.commit_offset("G", mq, 2)
    assert await service.query_offset("G", mq) == 2
    assert await service.query_offset("Other", mq) == 0
    await cluster.settled()
    await service.read("G", mq, 2, commit_offset=3)
    assert await service.query_offset("G", mq) == 3


async def test_queue_bounds_and_offsets_by_store_time(served):
    cluster, service = served
    await make_topic(cluster, "Timeline", 1)
    mq = queue(cluster, "Timeline")
    assert await service.queue_bounds(mq) == (0, 0)
    for i in range(2):
        assert (await service.send("Timeline", b"%d" % i, queue=mq)).stored
    after_ms = int(time.time() * 1000) + 1
    while time.time() * 1000 < after_ms:  # the next message is stored in a later millisecond
        await asyncio.sleep(0.001)
    assert (await service.send("Timeline", b"2", queue=mq)).stored
    await cluster.settled()
    assert await service.queue_bounds(mq) == (0, 3)
    assert await service.search_offset(mq, 0) == 0
    assert await service.search_offset(mq, after_ms) == 2
    assert await service.search_offset(mq, after_ms + 3_600_000) == 3
    with pytest.raises(MessagingError):
        await service.queue_bounds(MessageQueue(topic="Timeline", broker_name="nowhere", queue_id=0))


async def test_unknown_topics_and_bad_requests_get_their_codes(served):
    cluster, service = served
    await make_topic(cluster, "Known", 2)
    unknown = await service.read("G", queue(cluster, "Unknown"), 0)
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST, unknown
    beyond = await service.read("G", queue(cluster, "Known", 7), 0)
    assert beyond.code == ResponseCode.SYSTEM_ERROR and "queueId 7" in beyond.remark
    named = await service.send("no spaces allowed", b"x")
    assert named.code == ResponseCode.MESSAGE_ILLEGAL and not named.stored, named
    wrong_queue = await service.send("Known", b"x", queue=queue(cluster, "Known", 9))
    assert wrong_queue.code == ResponseCode.SYSTEM_ERROR and "queueId 9" in wrong_queue.remark
    system = await service.send("SCHEDULE_TOPIC_XXXX", b"x")
    assert system.code == ResponseCode.NO_PERMISSION, system
    with pytest.raises(MessagingError):
        await service.query_offset("G", MessageQueue(topic="Known", broker_name="nowhere", queue_id=0))


async def test_permissions_are_enforced(served):
    cluster, service = served
    await make_topic(cluster, "ReadOnly", 1, perm=PERM_READ)
    await make_topic(cluster, "WriteOnly", 1, perm=PERM_WRITE)
    refused = await service.send("ReadOnly", b"x")
    assert refused.code == ResponseCode.NO_PERMISSION and "not writable" in refused.remark, refused
    unread = await service.read("G", queue(cluster, "WriteOnly"), 0)
    assert unread.code == ResponseCode.NO_PERMISSION and "not readable" in unread.remark
    cluster.broker.groups.put(SubscriptionGroupConfig("Banned", consume_enable=False))
    banned = await service.read("Banned", queue(cluster, "ReadOnly"), 0)
    assert banned.code == ResponseCode.NO_PERMISSION and "may not consume" in banned.remark


@pytest.mark.parametrize("implementation", [LocalMessageService, RemoteMessageService])
def test_each_implementation_has_the_interface_s_signatures(implementation):
    """Fronts call either through the MessageService Protocol: same methods, same parameters."""
    wanted = {
        name: inspect.signature(member)
        for name, member in vars(MessageService).items()
        if inspect.iscoroutinefunction(member)
    }
    wanted_names = {"send", "send_batch", "read", "query_offset", "commit_offset", "route"}
    assert wanted_names | {"pop", "ack", "change_invisible_time"} <= set(wanted)
    for name, signature in wanted.items():
        assert inspect.signature(getattr(implementation, name)) == signature, name


# --- pop-style consumption ----------------------------------------------------------------------


def popped(outcome) -> list:
    assert outcome.code == ResponseCode.SUCCESS, outcome
    return decode_records(outcome.body)


async def test_pop_ack_and_a_message_left_unacked_comes_back_with_its_attempt_raised(served):
    cluster, service = served
    await make_topic(cluster, "Jobs")
    for i in range(4):
        await service.send("Jobs", b"job%d" % i, tagged("a"), queue=queue(cluster, "Jobs", i % 2))
    await cluster.settled()
    got = popped(await service.pop("Jobs-workers", "Jobs", 32, 60_000, init_mode=INIT_MODE_MIN))
    assert sorted(m.body for m in got) == [b"job0", b"job1", b"job2", b"job3"]
    for m in got[1:]:
        await service.ack("Jobs-workers", "Jobs", m.properties[POP_CK])
    kept = got[0]
    renewed = await service.change_invisible_time("Jobs-workers", "Jobs", kept.properties[POP_CK], 0)
    again = popped(await service.pop("Jobs-workers", "Jobs", 32, 60_000, poll_ms=5_000))
    assert [(m.body, m.reconsume_times) for m in again] == [(kept.body, 1)]
    with pytest.raises(MessagingError) as stale:  # the handle before the change is no longer current
        await service.ack("Jobs-workers", "Jobs", kept.properties[POP_CK])
    assert stale.value.code == ResponseCode.NO_MESSAGE
    with pytest.raises(MessagingError):  # nor the renewed one: the message came back meanwhile
        await service.ack("Jobs-workers", "Jobs", renewed)
    await service.ack("Jobs-workers", "Jobs", again[0].properties[POP_CK])
    nothing = await service.pop("Jobs-workers", "Jobs", 32, 60_000, poll_ms=200)
    assert nothing.code == ResponseCode.POLLING_TIMEOUT and not nothing.body


async def test_a_batch_ack_settles_each_current_handle_and_names_the_stale_ones(served):
    cluster, service = served
    await make_topic(cluster, "Batch")
    for i in range(6):
        await service.send("Batch", b"m%d" % i, tagged("a"), queue=queue(cluster, "Batch", i % 2))
    await cluster.settled()
    got = popped(await service.pop("Batchers", "Batch", 32, 60_000, init_mode=INIT_MODE_MIN))
    handles = [m.properties[POP_CK] for m in got]
    await service.ack("Batchers", "Batch", handles[0])  # acked already: stale in the batch
    errors = await service.ack_batch("Batchers", "Batch", [*handles, "not a handle"])
    assert errors[1:-1] == [None] * 5
    assert all(isinstance(e, MessagingError) for e in (errors[0], errors[-1]))
    nothing = await service.pop("Batchers", "Batch", 32, 60_000, poll_ms=200)
    assert nothing.code == ResponseCode.POLLING_TIMEOUT


async def test_a_held_pop_wakes_up_when_a_message_arrives_and_filters_by_tag(served):
    cluster, service = served
    await make_topic(cluster, "Later", 1)
    waiting = asyncio.ensure_future(
        service.pop(
            "Waiters", "Later", 8, 30_000, queue=queue(cluster, "Later"), expression="b", poll_ms=10_000
        )
    )
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await service.send("Later", b"not for us", tagged("a"), queue=queue(cluster, "Later"))
    await service.send("Later", b"for us", tagged("b"), queue=queue(cluster, "Later"))
    started = time.monotonic()
    got = popped(await asyncio.wait_for(waiting, 10))
    assert [m.body for m in got] == [b"for us"] and time.monotonic() - started < 5


async def test_arrivals_are_told_in_process_and_a_remote_service_says_it_cannot(served):
    cluster, service = served
    await make_topic(cluster, "Told", 2)
    heard: list[tuple[str, int]] = []
    stop = service.watch_arrivals(heard.extend)
    if not service.in_process:
        assert stop is None  # a front long-polls instead
        return
    assert stop is not None
    assert (await service.send("Told", b"one", queue=queue(cluster, "Told", 1))).stored
    async with asyncio.timeout(10):
        while ("Told", 1) not in heard:
            await asyncio.sleep(0.01)
    assert ("Told", 0) not in heard
    stop()
    heard.clear()
    still: list[tuple[str, int]] = []
    stop_still = service.watch_arrivals(still.extend)
    assert (await service.send("Told", b"two", queue=queue(cluster, "Told", 0))).stored
    async with asyncio.timeout(10):
        while ("Told", 0) not in still:  # told to the listener left, not to the stopped one
            await asyncio.sleep(0.01)
    assert heard == []
    assert stop_still is not None
    stop_still()


async def test_pop_errors_get_their_codes(served):
    cluster, service = served
    await make_topic(cluster, "Known", 1)
    assert (await service.pop("G", "Unknown-topic", 1, 60_000)).code == ResponseCode.TOPIC_NOT_EXIST
    cluster.broker.groups.put(SubscriptionGroupConfig("Stopped", consume_enable=False))
    assert (await service.pop("Stopped", "Known", 1, 60_000)).code == ResponseCode.NO_PERMISSION
    with pytest.raises(MessagingError) as bad:
        await service.ack("G", "Known", "not a handle")
    assert bad.value.code == ResponseCode.INVALID_PARAMETER


async def test_a_handle_popped_through_one_service_is_settled_through_the_other(served):
    """Handles are self-describing: a message received through one front is acked through another."""
    cluster, service = served
    broker = cluster.broker
    local = LocalMessageService(
        broker.puts, broker.reads, broker.pops, broker.topics, broker.config.broker_name
    )
    await make_topic(cluster, "Shared", 1)
    await service.send("Shared", b"once", tagged("x"), queue=queue(cluster, "Shared"))
    await cluster.settled()
    [m] = popped(await local.pop("Sharers", "Shared", 1, 60_000, init_mode=INIT_MODE_MIN))
    async with RemoteMessageService(cluster.namesrv_addr) as remote:
        other = remote if isinstance(service, LocalMessageService) else service
        await other.ack("Sharers", "Shared", m.properties[POP_CK])
    assert len(broker.pops.table) == 0


async def test_a_popped_message_is_moved_to_the_dead_letter_queue_and_settled(served):
    cluster, service = served
    await make_topic(cluster, "Poison", 1)
    await service.send("Poison", b"bad", tagged("x", UNIQ_KEY="poison-1"), queue=queue(cluster, "Poison"))
    await cluster.settled()
    [m] = popped(await service.pop("Doctors", "Poison", 1, 60_000, init_mode=INIT_MODE_MIN))
    await service.dead_letter("Doctors", "Poison", m.properties[POP_CK])
    with pytest.raises(MessagingError):  # settled: the handle is no longer current
        await service.ack("Doctors", "Poison", m.properties[POP_CK])
    with pytest.raises(MessagingError):  # nor can it be dead-lettered twice
        await service.dead_letter("Doctors", "Poison", m.properties[POP_CK])
    await cluster.broker.registrar.register_all()
    await cluster.settled()
    dlq = queue(cluster, "%DLQ%Doctors", 0)
    [dead] = decode_records((await service.read("Inspectors", dlq, 0)).body())
    assert (dead.body, dead.msg_id, dead.tags) == (b"bad", "poison-1", "x")
    nothing = await service.pop("Doctors", "Poison", 1, 60_000, poll_ms=200)
    assert nothing.code == ResponseCode.POLLING_TIMEOUT


async def test_a_half_message_shows_when_committed_and_never_when_rolled_back(served):
    cluster, service = served
    await make_topic(cluster, "Payments", 1)
    mq = queue(cluster, "Payments")
    half = {Prop.TRAN_MSG: "true", Prop.PGROUP: "Payers"}
    kept = await service.send("Payments", b"kept", tagged("t", UNIQ_KEY="tx-1", **half), sys_flag=PREPARED)
    dropped = await service.send(
        "Payments", b"dropped", tagged("t", UNIQ_KEY="tx-2", **half), sys_flag=PREPARED
    )
    assert kept.stored and dropped.stored, (kept, dropped)
    await cluster.settled()
    assert (await service.read("G", mq, 0)).code == ResponseCode.PULL_NOT_FOUND  # invisible while open
    await service.end_transaction("Payers", kept, True, topic="Payments", transaction_id="tx-1")
    await service.end_transaction("Payers", dropped, False, topic="Payments", transaction_id="tx-2")
    await cluster.settled()
    assert bodies(await service.read("G", mq, 0)) == [b"kept"]
    await service.end_transaction("Payers", kept, True, topic="Payments")  # again: no second copy
    open_one = await service.send("Payments", b"open", tagged("t", **half), sys_flag=PREPARED)
    with pytest.raises(MessagingError):  # only its producer group ends it
        await service.end_transaction("Others", open_one, True, topic="Payments")
    await cluster.settled()
    assert bodies(await service.read("G", mq, 0)) == [b"kept"]


async def test_a_timed_message_is_recalled_by_its_handle_before_it_is_due(served):
    cluster, service = served
    await make_topic(cluster, "Reminders", 1)
    await make_topic(cluster, "Known", 1)
    mq = queue(cluster, "Reminders")
    due = str(int(time.time() * 1000) + 2_000)
    sent = {
        body: await service.send(
            "Reminders", body, tagged("t", UNIQ_KEY=f"id-{body.decode()}", TIMER_DELIVER_MS=due)
        )
        for body in (b"recalled", b"kept")
    }
    plain = await service.send("Reminders", b"now", tagged("t"))
    assert plain.stored and plain.recall_handle is None
    handle = sent[b"recalled"].recall_handle
    assert handle and sent[b"kept"].recall_handle not in (None, handle)
    with pytest.raises(MessagingError) as other_topic:
        await service.recall("Known", handle)
    assert other_topic.value.code == ResponseCode.ILLEGAL_OPERATION
    with pytest.raises(MessagingError) as malformed:
        await service.recall("Reminders", "not a handle")
    assert malformed.value.code == ResponseCode.ILLEGAL_OPERATION
    assert await service.recall("Reminders", handle, producer_group="P") == "id-recalled"
    timer = cluster.broker.scheduler.timer
    async with asyncio.timeout(15):  # the slot is done when due: the kept one delivered, the recalled never
        while timer.pending or (await service.queue_bounds(mq))[1] < 2:
            await asyncio.sleep(0.1)
    await cluster.settled()
    assert bodies(await service.read("G", mq, 0)) == [b"now", b"kept"]
    with pytest.raises(MessagingError) as late:  # due already
        await service.recall("Reminders", sent[b"kept"].recall_handle)
    assert late.value.code == ResponseCode.ILLEGAL_OPERATION


async def test_the_largest_body_is_the_broker_s_max_message_size(served):
    cluster, service = served
    assert service.max_body_size == cluster.broker.config.store.max_message_size == 4 * 1024 * 1024


async def test_a_topic_config_carries_its_attributes(served):
    cluster, service = served
    cluster.broker.topics.put(TopicConfig("Typed", 2, 2, 6, attributes={"message.type": "FIFO"}))
    await cluster.broker.registrar.register_all()
    found = await service.topic_config("Typed")
    assert found is not None and found.attributes == {"message.type": "FIFO"}
    assert (found.read_queue_nums, found.write_queue_nums) == (2, 2)
    assert await service.topic_config("Untyped") is None


async def test_a_consumer_group_config_is_looked_up_not_created(served):
    cluster, service = served
    await make_topic(cluster, "Grouped", 1)
    cluster.broker.groups.put(
        SubscriptionGroupConfig("Orderly", consume_message_orderly=True, retry_max_times=3)
    )
    found = await service.consumer_group("Orderly", "Grouped")
    assert found is not None and found.consume_message_orderly and found.retry_max_times == 3
    assert await service.consumer_group("Unknown", "Grouped") is None
    assert "Unknown" not in cluster.broker.groups.groups


async def test_a_cluster_route_is_kept_until_a_send_to_it_fails(make_cluster):  # noqa: F811
    """Sends do not each ask the NameServers where the topic is; a refused send asks again."""
    cluster = await make_cluster()
    await make_topic(cluster, "Kept", 2)
    async with RemoteMessageService(cluster.namesrv_addr) as remote:
        assert [d.write_queue_nums for d in await remote.route("Kept") or []] == [2]
        await make_topic(cluster, "Kept", 4, PERM_READ)  # the broker refuses sends from now on
        assert [d.write_queue_nums for d in await remote.route("Kept") or []] == [2]
        refused = await remote.send("Kept", b"x", tagged("x"))
        assert refused.code == ResponseCode.NO_PERMISSION
        assert [d.write_queue_nums for d in await remote.route("Kept") or []] == [4]
