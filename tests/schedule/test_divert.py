"""The hold-back rules as a pure function, and its parsers fed garbage (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferrymq.broker.schedule import TIMER_TOPIC, ScheduleError, divert
from ferrymq.protocol.properties import decode_properties, encode_properties
from ferrymq.protocol.sys_flag import TRANSACTION_COMMIT_TYPE, TRANSACTION_PREPARED_TYPE
from ferrymq.protocol.topic_names import SCHEDULE_TOPIC
from ferrymq.store.delay_levels import parse_delay_levels

NOW = 1_800_000_000_123


def run(props: dict[str, str], sys_flag: int = 0, topic: str = "T", queue_id: int = 3):
    return divert(encode_properties(props).encode(), topic, queue_id, sys_flag, NOW, 18, 3 * 86400, 1000)


def test_plain_messages_are_not_held_back():
    assert run({"TAGS": "a", "MY_DELAY": "3"}) is None


def test_a_delay_level_goes_to_its_queue_with_the_destination_saved():
    topic, queue_id, raw = run({"DELAY": "3", "TIMER_DELAY_SEC": "9"})
    props = decode_properties(raw)
    assert (topic, queue_id) == (SCHEDULE_TOPIC, 2)
    assert props["REAL_TOPIC"] == "T" and props["REAL_QID"] == "3" and "TIMER_DELAY_SEC" not in props


def test_levels_above_the_highest_are_clamped_and_zero_or_negative_ones_ignored():
    _, queue_id, raw = run({"DELAY": "40"})
    assert queue_id == 17 and decode_properties(raw)["DELAY"] == "18"
    assert run({"DELAY": "0"}) is None and run({"DELAY": "-1"}) is None


def test_delivery_times_round_down_to_the_second_and_a_whole_second_one_step_earlier():
    _, _, raw = run({"TIMER_DELIVER_MS": str(NOW + 5_500)})
    assert decode_properties(raw)["TIMER_OUT_MS"] == str((NOW + 5_500) // 1000 * 1000)
    whole = (NOW // 1000 + 7) * 1000
    topic, queue_id, raw = run({"TIMER_DELIVER_MS": str(whole)})
    assert (topic, queue_id) == (TIMER_TOPIC, 0)
    assert decode_properties(raw)["TIMER_OUT_MS"] == str(whole - 1000)  # delivered from `whole` on
    _, _, raw = run({"TIMER_DELAY_SEC": "10"})
    assert decode_properties(raw)["TIMER_OUT_MS"] == str((NOW + 10_000) // 1000 * 1000)
    _, _, raw = run({"TIMER_DELAY_MS": "2500"})
    assert decode_properties(raw)["TIMER_OUT_MS"] == str((NOW + 2_500) // 1000 * 1000)


def test_past_times_converted_ones_and_transaction_halves_are_left_alone():
    assert run({"TIMER_DELIVER_MS": str(NOW - 1)}) is None
    assert run({"TIMER_DELAY_SEC": "5", "TIMER_OUT_MS": "1"}) is None
    assert run({"TIMER_DELAY_SEC": "5"}, topic=TIMER_TOPIC) is None
    assert run({"DELAY": "2"}, sys_flag=TRANSACTION_PREPARED_TYPE) is None
    assert run({"DELAY": "2"}, sys_flag=TRANSACTION_COMMIT_TYPE)[0] == SCHEDULE_TOPIC


def test_too_far_or_malformed_times_are_refused_clearly():
    with pytest.raises(ScheduleError, match="timer_max_delay_sec"):
        run({"TIMER_DELAY_SEC": str(3 * 86400 + 1)})
    with pytest.raises(ScheduleError, match="TIMER_DELIVER_MS must be a whole number"):
        run({"TIMER_DELIVER_MS": "tomorrow"})


@given(st.binary(max_size=200), st.integers(-(2**31), 2**31 - 1), st.integers(0, 255))
def test_divert_accepts_any_properties_or_says_why_not(raw, queue_id, sys_flag):
    raw = b"DELAY\x01" + raw if queue_id % 2 else b"TIMER_DELAY_MS\x01" + raw
    try:
        result = divert(raw, "T", queue_id, sys_flag, NOW, 18, 3 * 86400, 1000)
    except ScheduleError:
        return
    assert result is None or result[0] in (SCHEDULE_TOPIC, TIMER_TOPIC)


@given(st.text(max_size=60))
def test_delay_level_settings_parse_or_raise_value_error(text):
    try:
        levels = parse_delay_levels(text)
    except ValueError:
        return
    assert levels and all(ms > 0 for ms in levels)


def test_delay_level_units():
    assert parse_delay_levels("1s 2m 3h 1d") == [1000, 120_000, 10_800_000, 86_400_000]
