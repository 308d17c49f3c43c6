"""Delay levels and delivery times end to end: SDK producer → real broker → pull consumer."""

from __future__ import annotations

import time

import pytest

from ferrymq.broker.schedule import TIMER_TOPIC
from ferrymq.broker.schedule.intents import INTENT_TOPIC
from ferrymq.client import Message
from ferrymq.client.producer import SendError
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.topic_names import SCHEDULE_TOPIC

from .conftest import collect


async def _topic(producer, topic: str) -> None:
    """Create the topic (and its route) by a plain first send."""
    await producer.send(Message(topic, b"first"))


async def test_a_delay_level_holds_the_message_back_that_long_then_delivers_it_once(cluster, producer):
    await _topic(producer, "Delayed")
    sent = time.time()
    result = await producer.send(Message("Delayed", b"later", tags="TagA", keys="k1", delay_level=2))
    assert cluster.broker.store.get_max_offset(SCHEDULE_TOPIC, 1) == 1  # level 2 → queue 1
    got = await collect(cluster.namesrv_addr, "Delayed", 2)
    late = [(at, m) for at, m in got if m.body == b"later"]
    assert len(late) == 1, [m.body for _, m in got]
    at, m = late[0]
    assert at - sent >= 2.0
    assert m.store_timestamp - m.born_timestamp >= 2000 - 5
    assert m.queue_id == result.message_queue.queue_id
    assert m.tags == "TagA" and m.keys == ["k1"] and m.msg_id == result.msg_id
    assert "DELAY" not in m.properties
    assert m.properties["REAL_TOPIC"] == "Delayed"
    info = cluster.broker.runtime_info()
    assert info["scheduleMessageOffset_2"] == "1,1" and info["timerPendingMessages"] == "0"
    offsets = await cluster.call(RequestCode.GET_ALL_DELAY_OFFSET)
    assert offsets.code == ResponseCode.SUCCESS and b'"2":1' in bytes(offsets.body)


async def test_a_level_above_the_highest_is_clamped_to_it(cluster, producer):
    await _topic(producer, "Clamped")
    sent = time.time()
    await producer.send(Message("Clamped", b"x", delay_level=99))
    highest = cluster.broker.scheduler.delays.max_level
    assert cluster.broker.store.get_max_offset(SCHEDULE_TOPIC, highest - 1) == 1
    got = await collect(cluster.namesrv_addr, "Clamped", 2)
    assert [m.body for _, m in got] == [b"first", b"x"]
    assert got[1][0] - sent >= 1.0


@pytest.mark.parametrize(
    "props",
    [
        {"TIMER_DELAY_SEC": "2"},
        {"TIMER_DELAY_MS": "2000"},
        {"TIMER_DELIVER_MS": "{deliver}"},
    ],
)
async def test_a_delivery_time_is_kept_to_the_second_never_early(cluster, producer, props):
    await _topic(producer, "Timed")
    deliver_ms = int(time.time() * 1000) + 2000
    props = {k: v.format(deliver=deliver_ms) for k, v in props.items()}
    await producer.send(Message("Timed", b"timed", properties=props))
    assert cluster.broker.store.get_max_offset(TIMER_TOPIC, 0) == 1
    got = await collect(cluster.namesrv_addr, "Timed", 2)
    timed = [m for _, m in got if m.body == b"timed"]
    assert len(timed) == 1
    m = timed[0]
    assert m.store_timestamp >= deliver_ms - 50  # the time asked for (rounded to the second) or later
    assert m.store_timestamp - m.born_timestamp < 2000 + 1000 + 1500  # within its second, plus slack
    assert "REAL_TOPIC" not in m.properties and "TIMER_OUT_MS" in m.properties


async def test_a_delivery_time_in_the_past_is_delivered_at_once(cluster, producer):
    await _topic(producer, "Past")
    await producer.send(Message("Past", b"p", properties={"TIMER_DELIVER_MS": "1000"}))
    assert cluster.broker.store.get_max_offset(TIMER_TOPIC, 0) == 0
    got = await collect(cluster.namesrv_addr, "Past", 2)
    assert [m.body for _, m in got] == [b"first", b"p"]


async def test_a_delay_level_wins_over_a_delivery_time(cluster, producer):
    await _topic(producer, "Both")
    await producer.send(Message("Both", b"b", delay_level=1, properties={"TIMER_DELAY_SEC": "50"}))
    assert cluster.broker.store.get_max_offset(SCHEDULE_TOPIC, 0) == 1
    got = await collect(cluster.namesrv_addr, "Both", 2)
    assert "TIMER_DELAY_SEC" not in got[1][1].properties


@pytest.mark.parametrize(
    ("props", "words"),
    [
        ({"TIMER_DELAY_SEC": "61"}, "timer_max_delay_sec"),
        ({"TIMER_DELIVER_MS": str(int(time.time() * 1000) + 3_600_000)}, "timer_max_delay_sec"),
        ({"TIMER_DELAY_SEC": "soon"}, "whole number"),
        ({"DELAY": "two"}, "whole number"),
    ],
)
async def test_bad_schedules_get_a_clear_error(cluster, producer, props, words):
    with pytest.raises(SendError, match=words) as caught:
        await producer.send(Message("Refused", b"x", properties=props))
    assert caught.value.code == ResponseCode.MESSAGE_ILLEGAL


async def test_the_system_topics_cannot_be_sent_to(cluster, producer):
    for topic in (
        SCHEDULE_TOPIC,
        TIMER_TOPIC,
        INTENT_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "OFFSET_MOVED_EVENT",
    ):
        with pytest.raises(SendError, match="forbidden"):
            await producer.send(Message(topic, b"x"))
        with pytest.raises(SendError, match="forbidden"):  # nor in a batch
            await producer.send_batch([Message(topic, b"x"), Message(topic, b"y")])


async def test_pending_messages_survive_a_clean_restart_and_arrive_once(make_cluster, tmp_path):
    from ferrymq.client import Producer

    from .conftest import SHORT_LEVELS

    first = await make_cluster(message_delay_level=SHORT_LEVELS)
    async with Producer("p", first.namesrv_addr) as producer:
        await producer.send(Message("Restarted", b"first"))
        await producer.send(Message("Restarted", b"delayed", delay_level=2))
        await producer.send(Message("Restarted", b"timed", properties={"TIMER_DELAY_SEC": "3"}))
    sent = time.time()
    await first.broker.stop()
    second = await make_cluster(first.namesrv, message_delay_level=SHORT_LEVELS)
    assert second.broker.scheduler.timer.pending == 1
    got = await collect(second.namesrv_addr, "Restarted", 3)
    assert sorted(m.body for _, m in got) == [b"delayed", b"first", b"timed"]
    for at, m in got:
        if m.body != b"first":
            assert at - sent >= 1.0
    # A second restart after delivery brings nothing back.
    await second.broker.stop()
    third = await make_cluster(first.namesrv, message_delay_level=SHORT_LEVELS)
    assert third.broker.scheduler.timer.pending == 0
    again = await collect(third.namesrv_addr, "Restarted", 4, timeout=3.0, group="reader2")
    assert sorted(m.body for _, m in again) == [b"delayed", b"first", b"timed"]


def test_bad_delay_level_settings_fail_at_start(tmp_path):
    from ferrymq.broker.config import BrokerConfig, ConfigError

    with pytest.raises(ConfigError, match="5x"):
        BrokerConfig.from_settings({"message_delay_level": "1s 5x", "store_path_root_dir": str(tmp_path)})
    config = BrokerConfig.from_settings(
        {"message_delay_level": "1s 2m 3h 1d", "store_path_root_dir": str(tmp_path)}
    )
    assert config.store.message_delay_level == "1s 2m 3h 1d"


async def test_the_sdk_message_fields_schedule_and_batches_refuse_them(cluster, producer):
    from ferrymq.client import Producer

    await _topic(producer, "Fields")
    deliver = int(time.time() * 1000) + 1500
    await producer.send(Message("Fields", b"at", deliver_time_ms=deliver))
    await producer.send(Message("Fields", b"in", delay_ms=1500))
    assert cluster.broker.store.get_max_offset(TIMER_TOPIC, 0) == 2
    with pytest.raises(SendError, match="batch"):
        await producer.send_batch([Message("Fields", b"x", delay_ms=1000)])
    async with Producer("batching", cluster.namesrv_addr, auto_batch=True) as batching:
        await batching.send(Message("Fields", b"lvl", delay_level=1))  # goes alone, not in a batch
    assert cluster.broker.store.get_max_offset(SCHEDULE_TOPIC, 0) == 1
    got = await collect(cluster.namesrv_addr, "Fields", 4)
    assert sorted(m.body for _, m in got) == [b"at", b"first", b"in", b"lvl"]
    at = next(m for _, m in got if m.body == b"at")
    assert at.store_timestamp >= deliver - 50


async def test_a_recall_outlives_a_restart(make_cluster):
    from ferrymq.protocol.properties import encode_properties

    first = await make_cluster()
    due = str(int(time.time() * 1000) + 3_000)
    sent = [
        await first.broker.puts.put(
            "Recalled", 0, body, encode_properties({"UNIQ_KEY": uniq, "TIMER_DELIVER_MS": due}).encode()
        )
        for body, uniq in ((b"off", "off-1"), (b"on", "on-1"))
    ]
    assert await first.broker.recalls.recall("Recalled", sent[0].recall_handle) == "off-1"
    await first.broker.stop()
    second = await make_cluster(first.namesrv)
    assert second.broker.scheduler.timer.pending == 3  # both messages and the delete marker
    got = await collect(second.namesrv_addr, "Recalled", 1)
    assert [m.body for _, m in got] == [b"on"]
    assert second.broker.scheduler.timer.pending == 0
