"""Message trace end to end: traced producers and push consumers, the trace topic, `admin trace`."""

from __future__ import annotations

import asyncio

from click.testing import CliRunner

from ferrymq.cli.main import main
from ferrymq.client import LocalTransactionState, Message, Producer, PushConsumer, TransactionProducer
from ferrymq.client.trace import TraceDispatcher
from ferrymq.client.trace_view import message_trace
from ferrymq.protocol.trace import (
    TRACE_TOPIC,
    MessageType,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    batch_keys,
    decode_records,
    pub_for,
)
from tests.transaction.conftest import fast_checks, make_cluster, read_all, wait_for  # noqa: F401  (fixtures)


async def test_produce_consume_and_admin_trace(make_cluster):  # noqa: F811
    cluster = await make_cluster(trace_topic_enable=True, region_id="Hangzhou")
    assert cluster.broker.topics.get(TRACE_TOPIC).write_queue_nums == 1  # created at start
    failures = []

    async def listener(messages):
        if not failures:  # the first delivery fails: retried here after 5 s (no broker-side retry yet)
            failures.append(messages[0].msg_id)
            return False
        return True

    async with Producer("PG", cluster.namesrv_addr, enable_trace=True) as producer:
        sent = await producer.send(Message("Traced", b"hello", tags="TagA", keys=["order-1", "order-2"]))
        consumer = PushConsumer("CG", cluster.namesrv_addr, consume_from="first", enable_trace=True)
        consumer.subscribe("Traced", "*", listener)
        await consumer.start()
        try:
            await wait_for(lambda: len(failures) == 1, what="the first delivery")
            await wait_for(
                lambda: _dispatcher_idle(consumer.trace) and consumer.trace.written >= 4, 30, "consume traces"
            )
        finally:
            await consumer.shutdown()
    assert producer.trace.written == 1 and producer.trace.dropped == 0
    await cluster.settled()
    records = [
        r
        for m in await read_all(cluster.namesrv_addr, TRACE_TOPIC, "T1", expect=2)
        for r in decode_records(m.body)
    ]
    pub = next(r for r in records if isinstance(r, PubRecord))
    assert pub.region_id == "Hangzhou"
    assert (pub.group, pub.topic, pub.msg_id, pub.tags, pub.keys) == (
        "PG",
        "Traced",
        sent.msg_id,
        "TagA",
        "order-1 order-2",
    )
    assert (pub.offset_msg_id, pub.store_host, pub.body_length, pub.success) == (
        sent.offset_msg_id,
        cluster.broker_addr,
        5,
        True,
    )
    befores = [r for r in records if isinstance(r, SubBeforeRecord)]
    afters = [r for r in records if isinstance(r, SubAfterRecord)]
    assert [(b.group, b.msg_id, b.retry_times) for b in befores] == [
        ("CG", sent.msg_id, 0),
        ("CG", sent.msg_id, 1),
    ]
    assert [(a.success, a.context_code) for a in afters] == [(False, 4), (True, 0)]
    assert {a.request_id for a in afters} == {b.request_id for b in befores}

    from ferrymq.client.instance import ClientInstance

    instance = ClientInstance(cluster.namesrv_addr)
    try:
        await wait_for(lambda: _found(instance, sent.msg_id), 30, "the trace in the index")
        trace = await message_trace(instance, sent.msg_id)
    finally:
        await instance.close()
    assert trace.stored.queue_offset == sent.queue_offset and trace.stored.topic == "Traced"
    group = trace.groups["CG"]
    assert [a.success for a in group.attempts] == [False, True] and group.consumed and not group.dead_lettered

    out = await asyncio.to_thread(
        CliRunner().invoke, main, ["admin", "--namesrv", cluster.namesrv_addr, "trace", sent.msg_id]
    )
    assert out.exit_code == 0, out.output
    assert "by producer group PG to topic Traced" in out.output
    assert f"queue {sent.message_queue.queue_id} offset {sent.queue_offset}" in out.output
    assert (
        "consumer group CG" in out.output
        and "FAILED" in out.output
        and "CG: consumed after 2 attempt(s)" in out.output
    )
    missing = await asyncio.to_thread(
        CliRunner().invoke, main, ["admin", "--namesrv", cluster.namesrv_addr, "trace", "NOPE"]
    )
    assert missing.exit_code != 0 and "no trace of message NOPE" in missing.output


async def _found(instance, msg_id: str, topic: str = TRACE_TOPIC) -> bool:
    trace = await message_trace(instance, msg_id, topic)
    return bool(trace.sends and trace.groups and (topic == TRACE_TOPIC or trace.transaction))


def _dispatcher_idle(dispatcher: TraceDispatcher) -> bool:
    return not dispatcher._pending


async def test_custom_topic_transactions_and_dead_letters(make_cluster, fast_checks):  # noqa: F811
    cluster = await make_cluster(**fast_checks)  # no trace_topic_enable: the custom topic is auto-created

    async def checker(message):  # an async checker, asked after the local transaction said UNKNOW
        return LocalTransactionState.COMMIT_MESSAGE

    async with TransactionProducer(
        "TXG", cluster.namesrv_addr, enable_trace=True, trace_topic="MyTrace", checker=checker
    ) as producer:
        result = await producer.send_message_in_transaction(
            Message("TxTraced", b"t"), lambda m, a: LocalTransactionState.UNKNOW
        )
        await wait_for(lambda: producer.trace.pending + producer.trace.written == 3, what="check-back")
    consumed = asyncio.Event()
    consumer = PushConsumer(
        "CG2", cluster.namesrv_addr, consume_from="first", enable_trace=True, trace_topic="MyTrace"
    )
    consumer.subscribe("TxTraced", "*", lambda messages: consumed.set())
    await consumer.start()
    try:
        await asyncio.wait_for(consumed.wait(), 20)
    finally:
        await consumer.shutdown()
    assert consumer.trace.written == 2
    async with Producer("DLQ-maker", cluster.namesrv_addr) as plain:  # stands in for the broker's DLQ move
        await plain.send(Message("%DLQ%CG2", b"t", properties={"UNIQ_KEY": result.msg_id}))
    await cluster.settled()
    from ferrymq.client.instance import ClientInstance

    instance = ClientInstance(cluster.namesrv_addr)
    try:
        await wait_for(lambda: _found(instance, result.msg_id, "MyTrace"), 30, "the trace in the index")
        trace = await message_trace(instance, result.msg_id, "MyTrace")
    finally:
        await instance.close()
    [pub], [unknown, committed] = trace.sends, trace.transaction
    assert pub.msg_type is MessageType.TRANS_HALF and pub.group == "TXG"
    assert (unknown.transaction_state, unknown.from_transaction_check, unknown.store_host, unknown.group) == (
        LocalTransactionState.UNKNOW, False, cluster.broker_addr, "TXG"
    )  # fmt: skip
    assert (committed.transaction_state, committed.from_transaction_check) == (
        LocalTransactionState.COMMIT_MESSAGE, True
    )  # fmt: skip
    assert trace.groups["CG2"].dead_lettered and trace.stored.topic == "TxTraced"


async def test_a_broker_with_trace_off_gets_no_pub_records(make_cluster):  # noqa: F811
    cluster = await make_cluster(trace_on=False)
    async with Producer("PG", cluster.namesrv_addr, enable_trace=True) as producer:
        await producer.send(Message("Untraced", b"x"))
    assert (producer.trace.written, producer.trace.dropped) == (0, 0)


async def test_a_failing_hook_does_not_fail_the_send(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    seen = []

    def broken(messages, result, started_ms, cost_ms):
        seen.append(result.msg_id)
        raise RuntimeError("hook bug")

    async with Producer("PG", cluster.namesrv_addr) as producer:
        producer.send_hooks.append(broken)
        result = await producer.send(Message("Hooked", b"x"))
    assert seen == [result.msg_id]


def test_bounded_buffer_drops_and_counts():
    from ferrymq.client.instance import ClientInstance

    dispatcher = TraceDispatcher(ClientInstance("127.0.0.1:1"), "G", max_pending=3)
    record = SubAfterRecord(request_id="r", msg_id="m", cost_time=1, success=True, keys="")
    for _ in range(5):
        dispatcher.add(record)
    assert (dispatcher.pending, dispatcher.dropped) == (3, 2)


def test_a_batch_is_one_pub_record_as_rocketmq_writes_it_indexed_by_runs_of_ids():
    from ferrymq.client.instance import ClientInstance
    from ferrymq.client.message import SendResult, SendStatus
    from ferrymq.client.trace import SendTracer
    from ferrymq.protocol.bodies import MessageQueue

    dispatcher = TraceDispatcher(ClientInstance("127.0.0.1:1"), "G")
    tracer = SendTracer(dispatcher, "G", dispatcher.producer.instance)
    ids = "C0A8000100FE,C0A8000100FF,C0A800010100"  # a producer's counter crossing a run of 256
    result = SendResult(SendStatus.SEND_OK, ids, "o1,o2,o3", MessageQueue("T", "b", 0), 0)
    batch = [Message("T", b"a", tags="A", keys=["k1", "k2"]), Message("T", b"bb"), Message("T", b"c")]
    tracer(batch, result, 1000, 3)
    [(text, index, count)] = dispatcher._pending
    [pub] = decode_records(text)
    assert pub == PubRecord(
        timestamp=1000, region_id="DefaultRegion", group="G", topic="T", msg_id=ids, tags="",
        keys="k1 k2", store_host="", body_length=4, cost_time=3, msg_type=MessageType.NORMAL,
        offset_msg_id="o1,o2,o3", success=True,
    )  # fmt: skip
    assert (index, count) == (["BATCH#C0A8000100", "BATCH#C0A8000101", "k1", "k2"], 1)
    assert all(batch_keys([i])[0] in index for i in ids.split(","))  # where admin trace looks
    second = pub_for(pub, "C0A8000100FF")
    assert (second.msg_id, second.offset_msg_id, second.group) == ("C0A8000100FF", "o2", "G")
    assert pub_for(pub, "C0A800010101") is None

    dispatcher._pending.clear()
    tracer([Message("T", b"x", tags="bad\x01tag")], result, 1000, 3)  # unreadable: skipped, not written
    assert not dispatcher._pending


def test_a_batch_with_more_keys_than_one_trace_message_holds_is_split():
    from ferrymq.client.instance import ClientInstance
    from ferrymq.client.message import SendResult, SendStatus
    from ferrymq.client.trace import MAX_KEYS_BYTES, SendTracer, _trace_messages
    from ferrymq.protocol.bodies import MessageQueue

    dispatcher = TraceDispatcher(ClientInstance("127.0.0.1:1"), "G")
    tracer = SendTracer(dispatcher, "G", dispatcher.producer.instance)
    n = 1000  # ~105 key bytes each: ~105 KB of keys, several trace messages' worth
    ids = [f"id{i:04d}" for i in range(n)]
    result = SendResult(SendStatus.SEND_OK, ",".join(ids), ",".join(ids), MessageQueue("T", "b", 0), 0)
    tracer([Message("T", b"x", keys=[f"key-{i}-{'k' * 100}"]) for i in range(n)], result, 1000, 5)
    entries = list(dispatcher._pending)
    assert len(entries) > 1
    assert all(sum(map(len, keys)) + len(keys) <= MAX_KEYS_BYTES for _, keys, _ in entries)
    messages = list(_trace_messages("TRACE", entries))
    pubs = [r for m, _ in messages for r in decode_records(m.body)]
    assert ",".join(p.msg_id for p in pubs) == ",".join(ids)  # every message in exactly one record
    for message, _ in messages:  # each trace message is found by the runs and keys it covers
        assert len(" ".join(message.keys)) <= MAX_KEYS_BYTES
        records = decode_records(message.body)
        covered = {k for p in records for k in (*batch_keys(p.msg_id.split(",")), *p.keys.split())}
        assert set(message.keys) == covered


async def test_admin_trace_finds_a_message_sent_in_a_batch(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    async with Producer("PG", cluster.namesrv_addr, enable_trace=True) as producer:
        sent = await producer.send_batch([Message("TracedBatch", f"m{i}".encode()) for i in range(3)])
    ids = sent.msg_id.split(",")
    assert producer.trace.written == 1  # one record for the send, as RocketMQ's clients write
    await cluster.settled()
    from ferrymq.client.instance import ClientInstance

    instance = ClientInstance(cluster.namesrv_addr)
    try:
        await wait_for(lambda: _sent_traced(instance, ids[1]), 30, "the batch's trace in the index")
        trace = await message_trace(instance, ids[1])
    finally:
        await instance.close()
    [pub] = trace.sends
    assert (pub.msg_id, pub.offset_msg_id) == (ids[1], sent.offset_msg_id.split(",")[1])
    assert trace.stored.topic == "TracedBatch" and trace.stored.queue_offset == sent.queue_offset + 1
    assert trace.stored.body == b"m1"


async def test_admin_trace_reads_trace_messages_the_trace_producer_compressed(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    async with Producer("PG", cluster.namesrv_addr, enable_trace=True) as producer:
        sent = await producer.send_batch([Message("TracedBig", f"m{i}".encode()) for i in range(200)])
    ids = sent.msg_id.split(",")  # 200 ids in one Pub record: a trace body over 4 KiB
    await cluster.settled()
    [stored] = await read_all(cluster.namesrv_addr, TRACE_TOPIC, "C1", expect=1)
    assert stored.sys_flag & 0x300 == 0x300 and ids[150] in stored.body.decode()  # it was zlib-compressed
    from ferrymq.client.instance import ClientInstance

    instance = ClientInstance(cluster.namesrv_addr)
    try:
        await wait_for(lambda: _sent_traced(instance, ids[150]), 30, "the batch's trace in the index")
        trace = await message_trace(instance, ids[150])
    finally:
        await instance.close()
    assert [pub.msg_id for pub in trace.sends] == [ids[150]]


async def _sent_traced(instance, msg_id: str) -> bool:
    return bool((await message_trace(instance, msg_id)).sends)


def test_the_trace_report_counts_each_message_of_a_batch_record():
    from ferrymq.protocol.trace import encode_records
    from ferrymq.spark.trace_records import decode_body

    pub = PubRecord(
        timestamp=1000, region_id="r", group="G", topic="T", msg_id="m1,m2,m3", tags="", keys="",
        store_host="h", body_length=3, cost_time=1, msg_type=MessageType.NORMAL, offset_msg_id="o1,o2,o3",
        success=True,
    )  # fmt: skip
    rows = decode_body(encode_records([pub]))
    assert [(r[0], r[4]) for r in rows] == [("Pub", "m1"), ("Pub", "m2"), ("Pub", "m3")]
