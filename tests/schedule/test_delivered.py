"""The log's own record of deliveries (schedule/delivered.py): a redelivery counts when the record it
names is a held-back message of the topic asked about, with the same UNIQ_KEY; nothing else does."""

from __future__ import annotations

from ferrymq.broker.schedule.delivered import delivered_since, origin_property
from ferrymq.broker.schedule.divert import TIMER_TOPIC
from ferrymq.broker.schedule.intents import INTENT_TOPIC, encode_origins
from ferrymq.protocol.topic_names import SCHEDULE_TOPIC
from ferrymq.store import MessageStore
from tests.store.conftest import small_config


def test_only_redeliveries_naming_a_held_back_message_of_theirs_count(tmp_path):
    store = MessageStore(small_config(tmp_path / "store")).open()
    try:

        def put(topic: str, queue_id: int, uniq: str, extra: bytes = b"") -> int:
            props = f"REAL_TOPIC\x01T\x02REAL_QID\x010\x02UNIQ_KEY\x01{uniq}\x02".encode() + extra
            result = store.put_message(topic, queue_id, b"body", props)
            assert result.ok
            return result.wrote_offset

        held = [put(SCHEDULE_TOPIC, 2, f"held-{i}") for i in range(3)]  # level 3, queue offsets 0..2
        plain = put("T", 0, "plain")
        mark = store.commitlog.max_offset
        for _ in range(100):  # the walk crosses into the next segment (64 KiB)
            assert store.put_message("T", 0, b"f" * 1000).ok
        put("T", 0, "held-1", origin_property(held[1]))  # the redelivery of the second
        put("T", 0, "plain", origin_property(plain))  # names a record that was never held back
        put("T", 0, "other", origin_property(held[2]))  # a different message copied the property
        put("T", 0, "held-0", origin_property(held[0] + 1))  # names no record at all

        assert len(store.commitlog.segments) > 1
        assert delivered_since(store, mark, SCHEDULE_TOPIC).delivered == {2: {1}}
        assert delivered_since(store, 0, SCHEDULE_TOPIC).delivered == {2: {1}}  # held-back ones prove nothing
        assert delivered_since(store, mark, TIMER_TOPIC).delivered == {}
        assert delivered_since(store, store.commitlog.max_offset, SCHEDULE_TOPIC).delivered == {}
    finally:
        store.close()


def test_an_intent_without_its_redelivery_leaves_the_message_undecided(tmp_path):
    """A master's intent (intents.py) names the held-back messages it is about to redeliver: those
    the log then shows redelivered are delivered, the others undecided; an intent before the start
    of the walk, or naming a message of another topic, says nothing."""
    store = MessageStore(small_config(tmp_path / "store")).open()
    try:

        def put(topic: str, uniq: str, extra: bytes = b"") -> int:
            props = f"REAL_TOPIC\x01T\x02REAL_QID\x010\x02UNIQ_KEY\x01{uniq}\x02".encode() + extra
            result = store.put_message(topic, 0, b"body", props)
            assert result.ok
            return result.wrote_offset

        def intend(*origins: int) -> None:
            assert store.put_message(INTENT_TOPIC, 0, encode_origins(list(origins)), b"").ok

        held = [put(SCHEDULE_TOPIC, f"held-{i}") for i in range(4)]  # level 1, queue offsets 0..3
        timed = put(TIMER_TOPIC, "timed")
        intend(held[3])
        mark = store.commitlog.max_offset
        intend(held[0], held[1], timed)
        put("T", "held-0", origin_property(held[0]))
        intend(held[2])

        walk = delivered_since(store, mark, SCHEDULE_TOPIC)
        assert walk.delivered == {0: {0}}
        assert walk.undecided == {held[1], held[2]}
        assert delivered_since(store, mark, TIMER_TOPIC).undecided == {timed}
        assert delivered_since(store, 0, SCHEDULE_TOPIC).undecided == {held[1], held[2], held[3]}
    finally:
        store.close()
