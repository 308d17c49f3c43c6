"""The SDK's Producer and PullConsumer against real in-process NameServer and Brokers."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.broker.server import Broker
from ferrymq.client import Message, Producer, PullConsumer, SendError, SendStatus
from ferrymq.protocol.message_id import parse_offset_msg_id

from ..broker.conftest import broker_config, make_cluster  # noqa: F401  (fixture)


async def test_send_single_batch_and_orderly_then_pull_back(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    async with Producer("PG", cluster.namesrv_addr) as producer:
        one = await producer.send(
            Message("Orders", b"hello", tags="new", keys=["o-1"], properties={"k": "v"})
        )
        assert one.status is SendStatus.SEND_OK and len(one.msg_id) == 32
        assert parse_offset_msg_id(one.offset_msg_id)[1] == cluster.broker.config.listen_port
        batch = await producer.send_batch(
            [Message("Orders", f"b{i}".encode(), tags=f"t{i}" if i % 2 else None) for i in range(4)]
            + [Message("Orders", b"b4", properties={"UNIQ_KEY": "MY-OWN-ID"})]
        )
        batch_ids = batch.msg_id.split(",")
        assert len(batch_ids) == 5 and len(batch.offset_msg_id.split(",")) == 5
        assert batch_ids[4] == "MY-OWN-ID" and len(set(batch_ids)) == 5
        ordered = [
            await producer.send_orderly(Message("Orders", f"o{i}".encode()), "customer-7") for i in range(5)
        ]
        assert len({r.message_queue for r in ordered}) == 1
        assert [r.queue_offset for r in ordered] == sorted(r.queue_offset for r in ordered)
        big = await producer.send(Message("Orders", b"z" * 10_000))  # compressed on the wire
    await cluster.settled()
    async with PullConsumer("CG", cluster.namesrv_addr, consume_from="first") as consumer:
        await consumer.subscribe("Orders")
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 12 and time.monotonic() < deadline:
            got += await consumer.poll(1.0)
        bodies = {m.body for m in got}
        assert {b"hello", b"z" * 10_000} <= bodies and {f"b{i}".encode() for i in range(5)} <= bodies
        first = next(m for m in got if m.body == b"hello")
        assert (first.tags, first.keys, first.properties["k"], first.msg_id) == (
            "new",
            ["o-1"],
            "v",
            one.msg_id,
        )
        from_batch = {m.body: m for m in got if m.body[:1] == b"b"}
        assert [from_batch[f"b{i}".encode()].msg_id for i in range(5)] == batch_ids
        assert [from_batch[f"b{i}".encode()].tags for i in range(4)] == [None, "t1", None, "t3"]
        queue_of_orders = [
            m.body for m in got if m.queue_id == ordered[0].message_queue.queue_id and m.body[:1] == b"o"
        ]
        assert queue_of_orders == [f"o{i}".encode() for i in range(5)]
        assert big.status is SendStatus.SEND_OK
        await consumer.commit()
        mq = ordered[0].message_queue
        assert await consumer.committed(mq) == consumer.positions[mq]


async def test_tag_filter_and_resume_from_committed_offset(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    async with Producer("PG", cluster.namesrv_addr) as producer:
        for i in range(10):
            await producer.send(Message("Tagged", f"{i}".encode(), tags="AB"[i % 2]))
    await cluster.settled()
    async with PullConsumer("TG", cluster.namesrv_addr, consume_from="first") as consumer:
        await consumer.subscribe("Tagged", "B")
        got = await consumer.poll(2.0)
        while more := await consumer.poll(0.2):
            got += more
        assert sorted(m.body for m in got) == [b"1", b"3", b"5", b"7", b"9"]
    async with Producer("PG", cluster.namesrv_addr) as producer:
        await producer.send(Message("Tagged", b"late", tags="B"))
    async with PullConsumer("TG", cluster.namesrv_addr, consume_from="first") as again:
        await again.subscribe("Tagged", "B")
        got = await again.poll(5.0)
        assert [m.body for m in got] == [b"late"]  # committed at shutdown: nothing old comes again


async def test_sends_retry_on_another_broker_when_one_is_stopped(make_cluster, tmp_path):  # noqa: F811
    first = await make_cluster()
    second = Broker(broker_config(tmp_path / "b2", first.namesrv.port, broker_name="broker-b"))
    await second.start()
    try:
        async with Producer("PG", first.namesrv_addr, send_timeout=2.0) as producer:
            for i in range(8):  # the topic gets queues on both brokers
                await producer.send(Message("Shared", f"warm{i}".encode()))
            deadline = time.monotonic() + 10
            while len((await producer.instance.refresh_route("Shared")).masters) < 2:
                for _ in range(8):
                    await producer.send(Message("Shared", b"spread"))
                assert time.monotonic() < deadline, "the topic never reached both brokers"
            failed_before = producer.failed_attempts
            await second.stop()
            results = [await producer.send(Message("Shared", f"after{i}".encode())) for i in range(20)]
            assert all(r.status is SendStatus.SEND_OK for r in results)
            assert {r.message_queue.broker_name for r in results} == {"broker-a"}
            assert producer.failed_attempts > failed_before  # the sends that met the stopped broker
    finally:
        if not second.stopped:
            await second.stop()


async def test_bad_messages_and_missing_routes_fail_clearly(make_cluster):  # noqa: F811
    cluster = await make_cluster(auto_create_topic_enable=False)
    async with Producer("PG", cluster.namesrv_addr, max_message_size=100) as producer:
        with pytest.raises(SendError, match="empty"):
            await producer.send(Message("T", b""))
        with pytest.raises(SendError, match="max_message_size"):
            await producer.send(Message("T", b"x" * 101))
        with pytest.raises(SendError, match="bytes"):
            await producer.send(Message("T", "text"))  # type: ignore[arg-type]
        with pytest.raises(SendError, match="same topic"):
            await producer.send_batch([Message("T", b"a"), Message("U", b"b")])
        with pytest.raises(Exception, match="T"):  # no route: the broker refuses auto-creation
            await producer.send(Message("T", b"ok"))


async def test_auto_batching_gathers_concurrent_sends(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    async with Producer("PG", cluster.namesrv_addr, auto_batch=True, linger_ms=20) as producer:
        results = await asyncio.gather(*(producer.send(Message("Auto", f"{i}".encode())) for i in range(100)))
    assert len({r.msg_id for r in results}) == 100
    assert len({(r.message_queue, r.queue_offset) for r in results}) == 100
    assert len({r.message_queue for r in results}) < 10  # a few batches, not 100 requests


async def test_a_trickle_costs_one_pull_per_delivery(make_cluster, monkeypatch):  # noqa: F811
    """Every pull asks the broker to hold it while the queue is empty (as RocketMQ's consumers do),
    so messages arriving one by one take one PULL_MESSAGE each, not an empty answer and then a
    long poll."""
    from ferrymq.broker.processors.pull import PullProcessor

    pulls = []
    serve = PullProcessor.pull

    async def counted(self, conn, request):
        pulls.append(request.ext_fields["queueId"])
        return await serve(self, conn, request)

    monkeypatch.setattr(PullProcessor, "pull", counted)
    cluster = await make_cluster()
    async with (
        Producer("PG", cluster.namesrv_addr) as producer,
        PullConsumer("CG", cluster.namesrv_addr, consume_from="first") as consumer,
    ):
        await producer.send(Message("Trickle", b"first"))  # the topic and its queues exist
        await consumer.subscribe("Trickle")
        got = [m.body for m in await consumer.poll(timeout=5)]
        queues = len(consumer.positions)
        before = len(pulls)
        for i in range(20):
            await producer.send(Message("Trickle", b"%d" % i))
            while len(got) < i + 2:  # bounded by poll's own timeout
                polled = await consumer.poll(timeout=5)
                assert polled, "a message sent was not delivered within 5 s"
                got += [m.body for m in polled]
    assert sorted(got[1:], key=int) == [b"%d" % i for i in range(20)]
    assert len(pulls) - before <= 20 + queues  # one per delivery, plus the held ones re-sent
