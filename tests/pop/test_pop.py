"""Pop, ack, batch ack, invisible time, redelivery, DLQ, FIFO and restarts over remoting."""

from __future__ import annotations

import asyncio
import base64
import time

import pytest

from ferrymq.broker.pop import PopError
from ferrymq.protocol.codes import RequestCode as Req
from ferrymq.protocol.codes import ResponseCode as Res
from ferrymq.protocol.message_ext import decode_records
from ferrymq.protocol.pop import BatchAck, BatchAckMessageRequestBody, encode_batch_ack_body
from tests.pop.conftest import ack, change_invisible, create_group, create_topic, handle, pop, send


async def test_pop_then_ack_and_nothing_comes_back(cluster):
    await create_topic(cluster, "T", 2)
    for i in range(6):
        await send(cluster, "T", f"m{i}".encode(), queue_id=i % 2, TAGS="A", KEYS=f"k{i}")
    await cluster.settled()
    response, messages = await pop(cluster, "G", "T", invisible_ms=60_000)
    assert response.code == Res.SUCCESS
    assert sorted(m.body for m in messages) == [f"m{i}".encode() for i in range(6)]
    assert all(m.topic == "T" and m.reconsume_times == 0 for m in messages)
    assert response.ext_fields["reviveQid"] and response.ext_fields["msgOffsetInfo"]
    for m in messages:
        assert (await ack(cluster, "G", "T", m)).code == Res.SUCCESS
    assert len(cluster.broker.pops.table) == 0  # no checkpoint left open: nothing will come back
    response, messages = await pop(cluster, "G", "T")
    assert response.code == Res.POLLING_TIMEOUT and messages == []
    # the group's offsets moved as messages were popped
    offset = await cluster.call(Req.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T", "queueId": 0})
    assert offset.ext_fields["offset"] == "3"


async def test_unacked_message_comes_back_with_attempt_raised(cluster):
    await create_topic(cluster, "T")
    await send(cluster, "T", b"again", KEYS="k1", UNIQ_KEY="U1")
    await cluster.settled()
    _, [first] = await pop(cluster, "G", "T", invisible_ms=200)
    assert first.properties["UNIQ_KEY"] == "U1"
    response, messages = await pop(cluster, "G", "T", invisible_ms=200, poll_ms=3000)
    assert response.code == Res.SUCCESS, response.remark
    [again] = messages
    assert again.body == b"again" and again.topic == "T" and again.reconsume_times == 1
    assert again.properties.get("KEYS") == "k1" and again.properties["UNIQ_KEY"] == "U1"
    assert handle(again).split(" ")[4] == "1"  # from the pop retry topic
    # RocketMQ's proxy and clients name the real topic of a retried message in ACK_MESSAGE
    assert (await ack(cluster, "G", "%RETRY%G_T", again)).code == Res.SUCCESS
    assert (await ack(cluster, "G", "T", first)).code == Res.NO_MESSAGE  # its checkpoint was revived


async def test_batch_ack_by_bitset(cluster):
    await create_topic(cluster, "T")
    for i in range(5):
        await send(cluster, "T", f"m{i}".encode())
    await cluster.settled()
    _, messages = await pop(cluster, "G", "T", invisible_ms=60_000)
    parts = handle(messages[0]).split(" ")
    start = int(parts[0])
    bits = sum(1 << (m.queue_offset - start) for m in messages[:4])
    entry = BatchAck(
        consumer_group="G",
        topic="T",
        retry=parts[4],
        start_offset=start,
        queue_id=0,
        revive_queue_id=int(parts[3]),
        pop_time=int(parts[1]),
        invisible_time=int(parts[2]),
        bit_set=base64.b64encode(bits.to_bytes(1, "little")).decode(),
    )
    body = encode_batch_ack_body(BatchAckMessageRequestBody(broker_name=parts[5], acks=[entry]))
    assert (await cluster.call(Req.BATCH_ACK_MESSAGE, body=body)).code == Res.SUCCESS
    assert (await cluster.call(Req.BATCH_ACK_MESSAGE, body=body)).code == Res.NO_MESSAGE  # spent
    assert [(await ack(cluster, "G", "T", m)).code for m in messages] == [Res.NO_MESSAGE] * 4 + [Res.SUCCESS]


async def test_change_invisible_time_gives_a_new_handle_and_the_old_one_fails(cluster):
    await create_topic(cluster, "T")
    await send(cluster, "T", b"slow")
    await cluster.settled()
    _, [m] = await pop(cluster, "G", "T", invisible_ms=60_000)
    old = handle(m)
    response = await change_invisible(cluster, "G", "T", old, 200)
    assert response.code == Res.SUCCESS
    h = response.ext_fields
    parts = old.split(" ")
    new = (
        f"{m.queue_offset} {h['popTime']} {h['invisibleTime']} {h['reviveQid']} {parts[4]} {parts[5]} "
        f"{parts[6]} {m.queue_offset}"
    )
    stale = await ack(cluster, "G", "T", extra_info=old)
    assert stale.code == Res.NO_MESSAGE and "not current" in stale.remark
    # 200 ms later it is visible again (the old handle's 60 s no longer hold it)
    response, [again] = await pop(cluster, "G", "T", poll_ms=3000)
    assert again.body == b"slow" and again.reconsume_times == 1
    assert (await ack(cluster, "G", "T", extra_info=new)).code == Res.NO_MESSAGE  # revived meanwhile
    assert (await ack(cluster, "G", "T", again)).code == Res.SUCCESS


async def test_max_attempts_then_dead_letter_queue(cluster):
    await create_topic(cluster, "T")
    await create_group(cluster, "G", retry_max_times=2)
    await send(cluster, "T", b"poison")
    await cluster.settled()
    attempts = []
    for _ in range(3):
        response, messages = await pop(cluster, "G", "T", invisible_ms=100, poll_ms=3000)
        assert response.code == Res.SUCCESS, response.remark
        attempts += [m.reconsume_times for m in messages]
    assert attempts == [0, 1, 2]
    response, messages = await pop(cluster, "G", "T", invisible_ms=100, poll_ms=600)
    assert messages == []

    async def dead() -> bool:
        found = await pop(cluster, "DLQ-reader", "%DLQ%G", invisible_ms=60_000)
        return bool(found[1]) and found[1][0].body == b"poison" and found[1][0].reconsume_times == 3

    from tests.pop.conftest import eventually

    await eventually(dead, what="the dead letter")


async def test_fifo_group_holds_the_queue_until_acked_and_redelivers_in_order(cluster):
    await create_topic(cluster, "T")
    await create_group(cluster, "F", consume_message_orderly=True)
    for i in range(4):
        await send(cluster, "T", f"m{i}".encode())
    await cluster.settled()
    _, first = await pop(cluster, "F", "T", n=2, invisible_ms=60_000)
    assert [m.body for m in first] == [b"m0", b"m1"]
    assert handle(first[0]).split(" ")[3] == "999"
    _, blocked = await pop(cluster, "F", "T", n=2)
    assert blocked == []  # the queue waits for the batch
    assert (await ack(cluster, "F", "T", first[0])).code == Res.SUCCESS
    # m1 not acked: once its invisible time ends (made to end now) the same offset comes again, before m2
    assert (await change_invisible(cluster, "F", "T", handle(first[1]), 0)).code == Res.SUCCESS
    response, again = await pop(cluster, "F", "T", n=2, invisible_ms=60_000, poll_ms=3000)
    assert [(m.body, m.reconsume_times) for m in again] == [(b"m1", 1)]
    assert response.ext_fields["orderCountInfo"] == "0 0 1"
    assert (await ack(cluster, "F", "T", again[0])).code == Res.SUCCESS
    _, rest = await pop(cluster, "F", "T", n=4, poll_ms=3000)
    assert [m.body for m in rest] == [b"m2", b"m3"]


async def test_handles_survive_a_restart(make_cluster):
    first = await make_cluster()
    await create_topic(first, "T")
    for i in range(3):
        await send(first, "T", f"m{i}".encode())
    await first.settled()
    _, messages = await pop(first, "G", "T", invisible_ms=60_000)
    assert (await ack(first, "G", "T", messages[0])).code == Res.SUCCESS
    await first.broker.stop()
    second = await make_cluster(first.namesrv, listen_port=int(first.broker_addr.rsplit(":", 1)[1]))
    assert (await ack(second, "G", "T", messages[0])).code == Res.NO_MESSAGE  # acked before: stays acked
    assert (await ack(second, "G", "T", messages[1])).code == Res.SUCCESS
    assert (await change_invisible(second, "G", "T", handle(messages[2]), 0)).code == Res.SUCCESS
    _, again = await pop(second, "G", "T", invisible_ms=60_000, poll_ms=5000)
    assert [(m.body, m.reconsume_times) for m in again] == [(b"m2", 1)]


async def test_bad_handles_unknown_group_and_topic_get_clear_errors(make_cluster):
    cluster = await make_cluster(auto_create_subscription_group=False)
    await create_topic(cluster, "T")
    await create_group(cluster, "G")
    response, _ = await pop(cluster, "nobody", "T")
    assert response.code == Res.SUBSCRIPTION_GROUP_NOT_EXIST
    response, _ = await pop(cluster, "G", "missing")
    assert response.code == Res.TOPIC_NOT_EXIST
    response, _ = await pop(cluster, "G", "T", n=0)
    assert response.code == Res.INVALID_PARAMETER
    bad = await ack(cluster, "G", "T", extra_info="1 2 3 x 0 b 0 1")
    assert bad.code == Res.INVALID_PARAMETER and "receipt handle" in bad.remark
    unknown = await ack(
        cluster,
        "G",
        "T",
        extra_info=f"0 {int(time.time() * 1000)} 1000 0 0 {cluster.broker.config.broker_name} 0 0",
    )
    assert unknown.code == Res.NO_MESSAGE
    other_broker = await ack(cluster, "G", "T", extra_info="0 1 1000 0 0 elsewhere 0 0")
    assert other_broker.code == Res.INVALID_PARAMETER and "elsewhere" in other_broker.remark


async def test_long_poll_is_woken_by_a_send(cluster):
    await create_topic(cluster, "T", 4)
    started = time.monotonic()
    waiting = asyncio.create_task(pop(cluster, "G", "T", poll_ms=10_000))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await send(cluster, "T", b"wake", queue_id=3)
    _, messages = await asyncio.wait_for(waiting, 5)
    assert [m.body for m in messages] == [b"wake"]
    assert time.monotonic() - started < 5


async def test_notification_says_when_there_is_something(cluster):
    await create_topic(cluster, "T")
    ext = {"consumerGroup": "G", "topic": "T", "queueId": -1, "pollTime": 200, "bornTime": 0}
    response = await cluster.call(Req.NOTIFICATION, ext)
    assert response.code == Res.SUCCESS and response.ext_fields["hasMsg"] == "false"
    await send(cluster, "T", b"x")
    await cluster.settled()
    response = await cluster.call(Req.NOTIFICATION, ext)
    assert response.ext_fields["hasMsg"] == "true"


async def test_nack_follows_the_groups_retry_policy(cluster):
    """The service API the gRPC and AMQP fronts use: nack = invisible for the policy's delay."""
    from ferrymq.protocol.bodies import ExponentialRetryPolicy, GroupRetryPolicy

    await create_topic(cluster, "T")
    policy = GroupRetryPolicy(
        type="EXPONENTIAL", exponential_retry_policy=ExponentialRetryPolicy(300, 5000, 2)
    )
    await create_group(cluster, "G", group_retry_policy=policy)
    await send(cluster, "T", b"nacked")
    await cluster.settled()
    service = cluster.broker.pops
    first = await service.pop("G", "T", -1, 1, 60_000)
    nacked_at = time.time_ns() // 1_000_000
    new = await service.nack("G", "T", first.handles[0])
    assert 300 <= new.visible_at - nacked_at < 5000  # attempt 1: the initial 300 ms (not the 10 s ladder)
    again = await service.pop("G", "T", -1, 1, 60_000, poll_ms=5000)
    assert again.found and time.time() * 1000 >= new.visible_at
    [message] = decode_records(again.body)
    assert message.reconsume_times == 1 and message.topic == "T"
    nacked_at = time.time_ns() // 1_000_000
    second = await service.nack("G", "T", again.handles[0])
    assert 600 <= second.visible_at - nacked_at < 5000  # attempt 2: doubled
    await service.ack("G", "T", second)


async def test_fifo_dead_letters_after_max_attempts_and_the_queue_goes_on(cluster):
    await create_topic(cluster, "T")
    await create_group(cluster, "F", consume_message_orderly=True, retry_max_times=1)
    for body in (b"poison", b"next"):
        await send(cluster, "T", body)
    await cluster.settled()
    seen = []
    for _ in range(2):  # delivered twice (attempts 1 and 2), never acked
        _, messages = await pop(cluster, "F", "T", n=1, invisible_ms=150, poll_ms=3000)
        seen += [(m.body, m.reconsume_times) for m in messages]
    assert seen == [(b"poison", 0), (b"poison", 1)]
    _, messages = await pop(cluster, "F", "T", n=1, invisible_ms=60_000, poll_ms=3000)
    assert [m.body for m in messages] == [b"next"]  # poison went to the DLQ, order goes on
    _, dead = await pop(cluster, "reader", "%DLQ%F", invisible_ms=60_000)
    assert [(m.body, m.reconsume_times) for m in dead] == [(b"poison", 2)]


async def test_a_promoted_replica_rebuilds_the_pop_state_from_the_revive_topic(cluster):
    await create_topic(cluster, "T")
    await send(cluster, "T", b"m")
    await cluster.settled()
    _, [message] = await pop(cluster, "G", "T", invisible_ms=60_000)
    broker = cluster.broker
    epoch = broker.epoch
    await broker.change_role("slave", broker_id=1, epoch=epoch, master_addr=None, master_ha_addr=None)
    broker.pops.table.clear()  # as a slave's: it copies the revive topic, keeps no state
    await broker.change_role("master", broker_id=0, epoch=epoch + 1, master_addr=None, master_ha_addr=None)
    # the state is back with the promotion itself, before anything else can ask
    assert (await ack(cluster, "G", "T", message)).code == Res.SUCCESS


async def test_pop_rollback_export_is_a_no_op(cluster):
    response = await cluster.call(Req.POP_ROLLBACK)
    assert response.code == Res.SUCCESS and "CommitLog" in response.remark


async def test_a_fifo_long_poll_is_woken_by_the_ack_that_frees_the_queue(cluster):
    await create_topic(cluster, "T")
    await create_group(cluster, "F", consume_message_orderly=True)
    for body in (b"first", b"second"):
        await send(cluster, "T", body)
    await cluster.settled()
    _, [first] = await pop(cluster, "F", "T", n=1, invisible_ms=60_000)
    waiting = asyncio.create_task(pop(cluster, "F", "T", n=1, poll_ms=10_000))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # held: the queue waits for `first`
    started = time.monotonic()
    assert (await ack(cluster, "F", "T", first)).code == Res.SUCCESS
    _, messages = await asyncio.wait_for(waiting, 5)
    assert [m.body for m in messages] == [b"second"]
    assert time.monotonic() - started < 3


async def test_a_held_pop_is_answered_when_the_broker_stops(cluster):
    await create_topic(cluster, "T")
    waiting = asyncio.create_task(pop(cluster, "G", "T", poll_ms=20_000))
    await asyncio.sleep(0.3)
    started = time.monotonic()
    await cluster.broker.stop()
    response, messages = await asyncio.wait_for(waiting, 5)
    assert response.code == Res.POLLING_TIMEOUT and messages == []
    assert time.monotonic() - started < 2.5  # not the 3 s grace, let alone the 20 s poll


async def test_dead_letter_by_handle_moves_the_message_and_settles_it(cluster):
    await create_topic(cluster, "T")
    await create_group(cluster, "F", consume_message_orderly=True)
    for body in (b"give up", b"after"):
        await send(cluster, "T", body)
    await cluster.settled()
    service = cluster.broker.pops
    first = await service.pop("F", "T", -1, 1, 60_000)
    await service.dead_letter("F", "T", first.handles[0])
    with pytest.raises(PopError):
        await service.ack("F", "T", first.handles[0])  # settled
    after = await service.pop("F", "T", -1, 1, 60_000)  # the FIFO queue goes on at once
    assert [m.body for m in decode_records(after.body)] == [b"after"]
    _, dead = await pop(cluster, "reader", "%DLQ%F", invisible_ms=60_000)
    assert [m.body for m in dead] == [b"give up"]


async def test_a_slave_refuses_pop_and_ack_clearly_and_writes_nothing(cluster):
    await create_topic(cluster, "T")
    await send(cluster, "T", b"m")
    await cluster.settled()
    _, [message] = await pop(cluster, "G", "T", invisible_ms=60_000)
    store = cluster.broker.store
    end = store.commitlog.max_offset
    store.replica = True  # as a slave: its log is its master's copy
    try:
        response, messages = await pop(cluster, "G", "T")
        assert response.code == Res.SERVICE_NOT_AVAILABLE and messages == []
        assert "is a slave: pop from its master" in response.remark
        response = await ack(cluster, "G", "T", message)
        assert response.code == Res.SERVICE_NOT_AVAILABLE
        assert store.commitlog.max_offset == end  # no checkpoint or ack record written
    finally:
        store.replica = False
    assert (await ack(cluster, "G", "T", message)).code == Res.SUCCESS


async def test_a_retry_topic_with_a_queue_per_queue_keeps_handed_back_messages_apart(cluster):
    """A retry topic made with as many queues as its topic: what is handed back goes to the retry
    queue of its own queue, and a pop of one queue takes its retry queue first and no other (every
    time: not RocketMQ's 20 % chance of the retry topic first)."""
    await create_topic(cluster, "T", 3)
    await create_topic(cluster, "%RETRY%G_T", 3)
    for body, queue_id in ((b"low", 0), (b"high1", 2), (b"high2", 2), (b"high3", 2)):
        await send(cluster, "T", body, queue_id=queue_id)
    await cluster.settled()
    service = cluster.broker.pops
    low = await service.pop("G", "T", 0, 1, 60_000)
    high = await service.pop("G", "T", 2, 1, 60_000)
    for popped in (low, high):
        await service.change_invisible("G", "T", popped.handles[0], 0)
    for _ in range(5):  # queue 1 has nothing of its own, and the others' handed-back messages stay out
        assert not (await service.pop("G", "T", 1, 4, 60_000)).found
    again = await service.pop("G", "T", 2, 2, 60_000)
    got = [(m.body, m.reconsume_times, m.queue_id) for m in decode_records(again.body)]
    assert got == [(b"high1", 1, 2), (b"high2", 0, 2)]
    [back] = decode_records((await service.pop("G", "T", 0, 4, 60_000)).body)
    assert (back.body, back.reconsume_times, back.queue_id) == (b"low", 1, 0)
