"""Extensions attach to producers and consumers through their hooks, started and stopped with them."""

from __future__ import annotations

from ferrymq.client import Message, Producer, PushConsumer
from ferrymq.client.hooks import Hooks

from .test_push_consumer import eventually


class Recording:
    """An extension noting its life and every send and consume it is told of."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def install(self, hooks: Hooks) -> None:
        hooks.send.append(lambda messages, result, started_ms, cost_ms: self.events.append("sent"))
        hooks.consume.append(self)

    def before(self, group, messages):
        self.events.append(f"before {group}")
        return len(messages)

    def after(self, context, success: bool) -> None:
        self.events.append(f"after {context} {success}")

    async def start(self) -> None:
        self.events.append("start")

    async def stop(self) -> None:
        self.events.append("stop")


async def test_an_extension_sees_sends_and_consumes_between_its_start_and_stop(cluster, make_topic):
    await make_topic("Hooked", 1)
    sending, consuming = Recording(), Recording()
    producer = Producer("hooks-p", cluster.namesrv_addr)
    assert producer.hooks.add(sending) is sending
    consumer = PushConsumer("hooks-c", cluster.namesrv_addr, consume_from="first")
    consumer.hooks.add(consuming)
    consumer.subscribe("Hooked", "*", lambda messages: True)
    async with producer:
        await producer.send(Message("Hooked", b"x"))
        await consumer.start()
        await eventually(lambda: "after 1 True" in consuming.events, what="the consume")
        await consumer.shutdown()
    assert sending.events == ["start", "sent", "stop"]
    assert consuming.events == ["start", "before hooks-c", "after 1 True", "stop"]
