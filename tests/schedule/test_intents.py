"""Delivery intents between a slave acting for its master and the master taking the duties back
(schedule/intents.py), on a real store: the log says the master meant to deliver two held-back
messages and delivered one; the acting slave delivers neither of them but the later due one, and
holds the undecided one; handed back, the master delivers exactly that one; if the master stays
away, the slave delivers it after a while. A stalled slave holds the master back only for a while."""

from __future__ import annotations

import asyncio
import time

from ferrymq.broker.schedule.delay import DelayLevelService, DelayOffsetSerializeWrapper
from ferrymq.broker.schedule.delivered import origin_property
from ferrymq.broker.schedule.intents import INTENT_TOPIC, Intents, encode_origins
from ferrymq.broker.schedule.service import now_ms
from ferrymq.ha.dledger.command import PutCommand
from ferrymq.protocol.message_ext import decode_record
from ferrymq.protocol.topic_names import SCHEDULE_TOPIC
from ferrymq.store import MessageStore, PutResult, PutStatus
from tests.store.conftest import small_config


async def test_the_acting_slave_leaves_an_undecided_delivery_to_the_master(tmp_path):
    store = MessageStore(small_config(tmp_path / "store")).open()
    try:

        def stored(topic: str, uniq: str, extra: bytes = b"") -> int:
            props = f"REAL_TOPIC\x01T\x02REAL_QID\x010\x02UNIQ_KEY\x01{uniq}\x02".encode() + extra
            result = store.put_message(topic, 0, uniq.encode(), props)
            assert result.ok
            return result.wrote_offset

        async def put(c: PutCommand) -> PutResult:  # the broker's writer, as the services use it
            return store.put_message(c.topic, c.queue_id, bytes(c.body), bytes(c.properties))

        escaped: list[str] = []

        async def escape(record, drop, add) -> PutResult:  # the bridge to another group's master
            escaped.append(decode_record(record).body.decode())
            return PutResult(PutStatus.PUT_OK)

        held = [stored(SCHEDULE_TOPIC, f"m{i}") for i in range(4)]  # level 1 (1 s), queue offsets 0..3
        due_at = time.time() + 1.0
        mark = store.commitlog.max_offset  # the progress the slave copied: m0 delivered before this
        assert store.put_message(INTENT_TOPIC, 0, encode_origins([held[1], held[2]]), b"").ok
        stored("T", "m1", origin_property(held[1]))  # the master delivered m1; m2 it may have
        assert store.wait_dispatched()
        while time.time() < due_at:  # all four are due after their level's second
            await asyncio.sleep(0.05)

        slave = DelayLevelService(store, tmp_path / "slave", "1s", put, lambda: None)
        slave.adopt(DelayOffsetSerializeWrapper(offset_table={1: 1}, log_offset=mark))
        slave.escape = lambda: escape
        assert await slave.step() is None
        assert escaped == ["m3"]
        handback = slave.offset_table()
        assert handback.offset_table == {1: 4} and handback.held == [held[2]]

        master = DelayLevelService(store, tmp_path / "master", "1s", put, lambda: None)
        master.adopt(handback, handed_back=True)
        before = store.commitlog.max_offset
        assert await master.step() is None
        assert store.wait_dispatched()
        cq = store.queues.get("T", 0)
        assert cq is not None
        delivered = [
            decode_record(store.look_message_by_offset(cq.entry(i)[0])).body for i in range(cq.max_offset)
        ]
        assert delivered == [b"m1", b"m2"]  # m2 once, by the master; m3 only through the bridge
        assert store.commitlog.max_offset > before and master.held == set()
        assert await master.step() is None and store.get_max_offset("T", 0) == 2  # and not again
    finally:
        store.close()


async def test_an_acting_slave_delivers_what_it_held_once_the_master_stays_away(tmp_path):
    """The undecided message waits for the master only until `held_until` (the acting slave's
    `slave_acting_undecided_timeout`): then the slave delivers it, at least once."""
    store = MessageStore(small_config(tmp_path / "store")).open()
    try:
        props = b"REAL_TOPIC\x01T\x02REAL_QID\x010\x02UNIQ_KEY\x01m0\x02"
        held = store.put_message(SCHEDULE_TOPIC, 0, b"m0", props).wrote_offset
        due_at = time.time() + 1.0
        mark = store.commitlog.max_offset
        assert store.put_message(INTENT_TOPIC, 0, encode_origins([held]), b"").ok  # and no delivery
        assert store.wait_dispatched()
        while time.time() < due_at:  # due after its level's second
            await asyncio.sleep(0.05)
        escaped: list[bytes] = []

        async def escape(record, drop, add) -> PutResult:
            escaped.append(decode_record(record).body)
            return PutResult(PutStatus.PUT_OK)

        async def put(c: PutCommand) -> PutResult:
            raise AssertionError("an acting slave writes nothing to its log")

        slave = DelayLevelService(store, tmp_path / "slave", "1s", put, lambda: None)
        slave.adopt(DelayOffsetSerializeWrapper(offset_table={1: 0}, log_offset=mark))
        slave.escape = lambda: escape
        slave.held_until = now_ms() + 60_000
        next_due = await slave.step()
        assert escaped == [] and slave.held == {held} and next_due == slave.held_until
        slave.held_until = now_ms() - 1  # the master is still away
        assert await slave.step() is None
        assert escaped == [b"m0"] and slave.held == set() and slave.offset_table().held == []
    finally:
        store.close()


async def test_a_slave_that_does_not_acknowledge_is_left_out_until_it_catches_up(tmp_path):
    """A connected slave that does not acknowledge an intent within the timeout (stalled) holds the
    master back that long once; then it is left out until it has every intent stored before."""
    store = MessageStore(small_config(tmp_path / "store")).open()
    try:

        async def put(c: PutCommand) -> PutResult:
            return store.put_message(c.topic, c.queue_id, bytes(c.body), bytes(c.properties))

        acks = {1: 0, 2: 0}  # slave id -> how far it acknowledged the log
        intents = Intents(put, lambda: None, lambda: dict(acks), ack_timeout=0.3)

        async def slave_2_keeps_up() -> None:
            while True:
                acks[2] = store.commitlog.max_offset
                await asyncio.sleep(0.005)

        keeper = asyncio.create_task(slave_2_keeps_up())
        try:
            started = time.monotonic()
            assert await intents.deliveries([1]) and intents.left_out == {1}
            assert time.monotonic() - started >= 0.3
            started = time.monotonic()
            assert await intents.deliveries([2])  # slave 1 left out: no wait for it
            assert time.monotonic() - started < 0.3 and intents.left_out == {1}
            acks[1] = store.commitlog.max_offset  # it caught up: waited for again
            waiting = asyncio.create_task(intents.deliveries([3]))
            await asyncio.sleep(0.1)
            assert not waiting.done() and intents.left_out == set()
            acks[1] = store.commitlog.max_offset
            assert await asyncio.wait_for(waiting, 5.0)
        finally:
            keeper.cancel()
        assert intents.written_intents == 3
    finally:
        store.close()


async def test_intents_waiting_at_once_are_released_as_the_slave_gets_each(tmp_path):
    """Many commits may wait at once: each is released once the slave has its own intent, not before."""
    store = MessageStore(small_config(tmp_path / "store")).open()
    try:

        async def put(c: PutCommand) -> PutResult:
            return store.put_message(c.topic, c.queue_id, bytes(c.body), bytes(c.properties))

        acks = {1: store.commitlog.max_offset}
        intents = Intents(put, lambda: None, lambda: dict(acks), ack_timeout=60.0)

        async def stored(task_count: int) -> int:
            for _ in range(500):
                if intents.written_intents == task_count:
                    return store.commitlog.max_offset
                await asyncio.sleep(0.01)
            raise AssertionError("the intent was not stored")

        first = asyncio.create_task(intents.deliveries([1]))
        first_end = await stored(1)
        second = asyncio.create_task(intents.deliveries([2]))
        second_end = await stored(2)
        acks[1] = first_end
        assert await asyncio.wait_for(first, 5.0)
        await asyncio.sleep(0.05)
        assert not second.done()
        acks[1] = second_end
        assert await asyncio.wait_for(second, 5.0) and intents.left_out == set()
    finally:
        store.close()
