"""Every client owns its background tasks: stopping it leaves none of them running, and a task of
one that fails is logged at once under the client's name."""

from __future__ import annotations

import asyncio
import logging

from ferrymq.client import ClientInstance, Message, Producer, PullConsumer, PushConsumer
from ferrymq.client.offset_store import LocalOffsetStore
from ferrymq.client.trace import TraceDispatcher

from .test_push_consumer import Recorder, eventually

CLIENT_CODE = ("/ferrymq/client/", "/ferrymq/net/client.py")


def _client_tasks(before: set[asyncio.Task]) -> list[asyncio.Task]:
    """Tasks started since `before` whose coroutine is client code (the servers in this process
    have tasks of their own, e.g. long polls they hold for the closed connections until they expire)."""
    found = []
    for task in asyncio.all_tasks() - before:
        code = getattr(task.get_coro(), "cr_code", None)
        if code is not None and any(part in code.co_filename for part in CLIENT_CODE):
            found.append(task)
    return found


async def no_task_left(before: set[asyncio.Task]) -> None:
    """Right after a client stopped, none of its tasks is left, not even one about to end."""
    left = _client_tasks(before)
    assert not left, f"client tasks still running: {sorted(map(repr, left))}"


async def test_a_producer_leaves_no_task(cluster, make_topic):
    await make_topic("Tasks", 2)
    before = asyncio.all_tasks()
    producer = Producer("tasks-p", cluster.namesrv_addr, auto_batch=True, linger_ms=1, enable_trace=True)
    await producer.start()
    sent = asyncio.get_running_loop().create_future()
    producer.send_async(Message("Tasks", b"a"), lambda result, error: sent.set_result((result, error)))
    await producer.send(Message("Tasks", b"b"))
    result, error = await sent
    assert error is None and result.msg_id
    # one more in flight while it shuts down: it is let finish, not cut short
    last = asyncio.get_running_loop().create_future()
    producer.send_async(Message("Tasks", b"c"), lambda result, error: last.set_result(error))
    await producer.shutdown()
    assert last.done() and last.result() is None
    await no_task_left(before)


async def test_a_send_async_callback_that_fails_is_logged_by_the_producer(cluster, make_topic, caplog):
    await make_topic("Tasks", 1)
    called = asyncio.Event()

    def broken(result, error):
        called.set()
        raise RuntimeError("callback bug")

    async with Producer("tasks-cb", cluster.namesrv_addr) as producer:
        with caplog.at_level(logging.ERROR, logger="ferrymq.net.tasks"):
            producer.send_async(Message("Tasks", b"x"), broken)
            await called.wait()
            await eventually(lambda: any("producer tasks-cb" in r.getMessage() for r in caplog.records),
                             5, "the failure logged")  # fmt: skip
    [record] = [r for r in caplog.records if "producer tasks-cb" in r.getMessage()]
    assert "callback bug" in str(record.exc_info[1])


async def _consume_then_stop(cluster, producer, make_topic, topic: str, **options) -> None:
    await make_topic(topic, 2)
    before = asyncio.all_tasks()
    listener = Recorder()
    consumer = PushConsumer(f"tasks-{topic}", cluster.namesrv_addr, consume_from="first", **options)
    consumer.subscribe(topic, "*", listener)
    await consumer.start()
    sent = [f"{topic}{i}".encode() for i in range(6)]
    for body in sent:
        await producer.send(Message(topic, body))
    await eventually(lambda: listener.has(sent), what="every message consumed")
    await consumer.shutdown()
    await no_task_left(before)


async def test_a_concurrent_push_consumer_with_trace_leaves_no_task(cluster, producer, make_topic):
    await _consume_then_stop(cluster, producer, make_topic, "TasksConcurrent", enable_trace=True)


async def test_an_orderly_push_consumer_leaves_no_task(cluster, producer, make_topic):
    await _consume_then_stop(cluster, producer, make_topic, "TasksOrderly", orderly=True)


async def test_a_broadcasting_push_consumer_leaves_no_task(cluster, producer, make_topic, tmp_path):
    await _consume_then_stop(cluster, producer, make_topic, "TasksBroadcast", message_model="BROADCASTING",
                             offset_store_dir=tmp_path)  # fmt: skip


async def test_a_listener_stuck_past_the_shutdown_timeout_is_cancelled(cluster, producer, make_topic):
    await make_topic("TasksStuck", 1)
    before = asyncio.all_tasks()
    entered, cancelled = asyncio.Event(), asyncio.Event()

    async def stuck(messages):
        entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    consumer = PushConsumer("tasks-stuck", cluster.namesrv_addr, consume_from="first")
    consumer.subscribe("TasksStuck", "*", stuck)
    await consumer.start()
    await producer.send(Message("TasksStuck", b"x"))
    await asyncio.wait_for(entered.wait(), 15)
    await consumer.shutdown(timeout=0.2)
    assert cancelled.is_set()
    await no_task_left(before)


async def test_a_pull_consumer_with_long_polls_in_flight_leaves_no_task(cluster, producer, make_topic):
    await make_topic("TasksPull", 2)
    before = asyncio.all_tasks()
    consumer = PullConsumer("tasks-pull", cluster.namesrv_addr, consume_from="first")
    await consumer.start()
    await consumer.subscribe("TasksPull")
    await producer.send(Message("TasksPull", b"x"))
    got = []
    while not got:
        got = await consumer.poll(5)
    assert await consumer.poll(0.1) == []  # both queues are now held at the broker, empty
    await consumer.shutdown()
    await no_task_left(before)


async def test_a_client_instance_and_an_offset_store_leave_no_task(cluster, make_topic, tmp_path):
    await make_topic("TasksRoute", 1)
    before = asyncio.all_tasks()
    instance = ClientInstance(cluster.namesrv_addr, route_refresh=0.01, heartbeat_interval=0.01)
    await instance.start()
    routes = await asyncio.gather(*(instance.refresh_route("TasksRoute") for _ in range(3)))
    assert all(r.read_queues for r in routes)
    store = LocalOffsetStore(tmp_path, instance.client_id, "tasks-g")
    store.start()
    dispatcher = TraceDispatcher(instance, "tasks-g")
    await dispatcher.start()
    await asyncio.sleep(0.05)  # a few rounds of the periodic refresh and heartbeats
    await dispatcher.stop()
    await store.close()
    await instance.close()
    await no_task_left(before)
