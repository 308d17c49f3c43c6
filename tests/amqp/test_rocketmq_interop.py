"""One message, two protocols: what an AMQP client publishes to a queue, a RocketMQ client reads from
the queue's topic (body, key, headers as user properties), and what a RocketMQ client sends to that
topic, an AMQP consumer of the queue gets (tag as routing key, message id, properties as headers),
as docs/amqp.md's property mapping says."""

from __future__ import annotations

import asyncio

from pamqp import commands, header

from ferrymq.client.instance import ClientError
from ferrymq.client.message import Message
from ferrymq.client.producer import Producer
from ferrymq.client.simple_consumer import SimpleConsumer
from ferrymq.client.trace_view import message_trace
from ferrymq.meta.naming import queue_group, queue_topic
from tests.amqp.raw_client import RawClient

QUEUE = "interop"


def declare_and_publish(port: int) -> None:
    client = RawClient("127.0.0.1", port)
    try:
        client.open()
        client.open_channel(1)
        client.declare(1, QUEUE)
        client.send(1, commands.Confirm.Select())
        client.expect(commands.Confirm.SelectOk)
        properties = commands.Basic.Properties(
            content_type="application/json", message_id="order-1", headers={"region": "eu", "n": 7}
        )
        client.publish(1, "", QUEUE, b'{"order": 1}', properties)
        client.expect(commands.Basic.Ack)
    finally:
        client.close()


def get_one(port: int) -> tuple[commands.Basic.GetOk, commands.Basic.Properties, bytes]:
    client = RawClient("127.0.0.1", port)
    try:
        client.open()
        client.open_channel(1)
        client.send(1, commands.Basic.Get(queue=QUEUE, no_ack=True))
        _, get_ok = client.next_frame()
        assert isinstance(get_ok, commands.Basic.GetOk), get_ok
        _, content = client.next_frame()
        assert isinstance(content, header.ContentHeader)
        _, body = client.next_frame()
        return get_ok, content.properties, body.value
    finally:
        client.close()


async def test_amqp_published_is_read_by_rocketmq_and_the_other_way(local_gateway):
    namesrv = f"127.0.0.1:{local_gateway.cluster.namesrv.port}"
    topic = queue_topic("/", QUEUE)
    await asyncio.to_thread(declare_and_publish, local_gateway.port)
    await local_gateway.cluster.broker.registrar.register_all()
    reader = SimpleConsumer("rocketmq-readers", namesrv, subscriptions={topic: "*"}, await_duration=5)
    await reader.start()
    try:
        got = await reader.receive(1)
        assert len(got) == 1
        message = got[0]
        assert message.body == b'{"order": 1}'
        assert message.properties["KEYS"] == "order-1"
        assert (message.properties["region"], message.properties["n"]) == ("eu", "7")
        assert message.properties["TAGS"] == QUEUE  # the routing key, usable as a tag
        await reader.ack(message)
    finally:
        await reader.shutdown()

    producer = Producer("rocketmq-writers", namesrv)
    await producer.start()
    try:
        await producer.send(
            Message(topic, b"from rocketmq", tags="created", keys="k-1", properties={"a": "b"})
        )
    finally:
        await producer.shutdown()
    await asyncio.to_thread(get_one, local_gateway.port)  # the AMQP-published one, still in the queue
    get_ok, properties, body = await asyncio.to_thread(get_one, local_gateway.port)
    assert body == b"from rocketmq"
    assert (get_ok.exchange, get_ok.routing_key, get_ok.redelivered) == ("", "created", False)
    assert properties.headers["a"] == "b"
    assert properties.message_id and properties.delivery_mode == 2


def publish_and_consume_traced(port: int) -> None:
    client = RawClient("127.0.0.1", port)
    try:
        client.open()
        client.open_channel(1)
        client.send(1, commands.Queue.Declare(queue="traced", arguments={"x-message-trace": True}))
        client.expect(commands.Queue.DeclareOk)
        client.publish(1, "", "traced", b"followed")
        client.consume(1, "traced")
        deliver = client.expect(commands.Basic.Deliver)
        client.send(1, commands.Basic.Ack(delivery_tag=deliver.delivery_tag))
        client.send(1, commands.Basic.Qos())  # answered after the ack was taken
        client.expect(commands.Basic.QosOk)
    finally:
        client.close()


async def test_a_traced_queue_s_messages_show_in_admin_trace(local_gateway):
    """x-message-trace: the gateway writes RocketMQ trace records (Pub, SubBefore, SubAfter), so
    `ferrymq admin trace MSG_ID` tells an AMQP message's life."""
    namesrv = f"127.0.0.1:{local_gateway.cluster.namesrv.port}"
    await asyncio.to_thread(publish_and_consume_traced, local_gateway.port)
    await local_gateway.cluster.broker.registrar.register_all()
    reader = SimpleConsumer("trace-test-readers", namesrv, subscriptions={queue_topic("/", "traced"): "*"})
    await reader.start()
    try:
        msg_id = (await reader.receive(1))[0].msg_id
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            try:
                trace = await message_trace(reader.instance, msg_id)
            except ClientError:  # the trace topic is new: its route reaches the NameServer soon
                trace = None
            if (trace and trace.sends and trace.groups) or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.1)  # the gateway writes its records in batches, 100 ms apart
    finally:
        await reader.shutdown()
    assert trace is not None
    assert [(p.topic, p.success) for p in trace.sends] == [(queue_topic("/", "traced"), True)]
    consumed = trace.groups[queue_group("/", "traced")]
    assert [(a.retry_times, a.success) for a in consumed.attempts] == [(0, True)]
