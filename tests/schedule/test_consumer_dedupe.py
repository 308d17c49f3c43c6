"""PushConsumer(dedupe_window=N) against the real broker: repeated msg ids (a replayed Spark write, a
producer's retried send) are consumed once; a failed message's retry still comes."""

from __future__ import annotations

from collections import Counter

import pytest

from ferrymq.client import Message
from ferrymq.client.dedupe import SeenIds
from ferrymq.protocol.message_ext import MessageExt
from ferrymq.protocol.properties import Prop

from .conftest import eventually
from .test_consumer_retry import Flaky


class Counting:
    def __init__(self) -> None:
        self.bodies: Counter[bytes] = Counter()

    async def __call__(self, messages) -> bool:
        self.bodies.update(m.body for m in messages)
        return True


async def send_twice(producer, topic: str, n: int) -> None:
    """Every message twice with the same UNIQ_KEY, as a batch Spark replays after a failure."""
    for _ in range(2):
        for i in range(n):
            await producer.send(Message(topic, b"m%d" % i, properties={Prop.UNIQ_KEY: f"ID{i:030d}"}))


async def test_repeated_msg_ids_are_consumed_once(cluster, producer, start_consumer):
    await send_twice(producer, "Replayed", 20)
    once, every = Counting(), Counting()
    deduping = await start_consumer("once", "Replayed", once, consume_from="first", dedupe_window=1000)
    await start_consumer("every", "Replayed", every, consume_from="first")
    await eventually(lambda: sum(every.bodies.values()) == 40, what="every delivery to the plain group")
    await eventually(lambda: deduping.seen.dropped == 20, what="the repeats dropped")
    assert once.bodies == Counter({b"m%d" % i: 1 for i in range(20)})
    assert every.bodies == Counter({b"m%d" % i: 2 for i in range(20)})


async def test_a_failed_message_is_retried_even_with_a_dedupe_window(cluster, producer, start_consumer):
    await producer.send(Message("Flaky", b"job"))
    listener = Flaky(failures=1)
    await start_consumer("flaky", "Flaky", listener, consume_from="first", dedupe_window=10)
    await eventually(lambda: len(listener.seen) == 2, what="a failure, then its retry")
    assert [m.reconsume_times for m in listener.seen] == [0, 1]
    assert listener.seen[0].msg_id == listener.seen[1].msg_id


def _message(uniq: str) -> MessageExt:
    return MessageExt(topic="T", body=b"", properties={Prop.UNIQ_KEY: uniq})


def test_the_window_forgets_the_oldest_ids_first():
    seen = SeenIds(2)
    a, b, c = _message("A"), _message("B"), _message("C")
    assert seen.claim([a, b, a]) == [a, b] and seen.dropped == 1
    assert seen.claim([c]) == [c]  # A is forgotten now
    assert seen.claim([a, b]) == [a]
    seen.release([a])
    assert seen.claim([_message("A")])
    with pytest.raises(ValueError, match="at least one"):
        SeenIds(0)
