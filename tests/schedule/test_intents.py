"""Delivery intents between a slave acting for its master and the master taking the duties back
(schedule/intents.py), on a real store: the log says the master meant to deliver two held-back
messages and delivered one; the acting slave delivers neither of them but the later due one, and
holds the undecided one; handed back, the master delivers exactly that one."""

from __future__ import annotations

import asyncio
import time

from ferrymq.broker.schedule.delay import DelayLevelService, DelayOffsetSerializeWrapper
from ferrymq.broker.schedule.delivered import origin_property
from ferrymq.broker.schedule.intents import INTENT_TOPIC, encode_origins
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
