"""The pure parts of pop: receipt handles, bit sets, header info strings, record stamping, retry policy."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferrymq.broker.pop.records import AckRecord, CheckpointRecord, decode, encode
from ferrymq.broker.pop.table import CheckpointTable, OpenCheckpoint
from ferrymq.protocol.bodies import ExponentialRetryPolicy, GroupRetryPolicy
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.message_ext import MessageExt, decode_record
from ferrymq.protocol.pop import (
    POP_CK,
    ReceiptHandle,
    bits_of,
    decode_batch_ack_body,
    java_bitset_decode,
    java_bitset_encode,
    msg_offset_info,
    pop_retry_topic,
    real_topic,
    record_layout,
    stamp_record,
    start_offset_info,
    topic_type,
)
from ferrymq.protocol.retry_policy import next_delay_ms

handles = st.builds(
    ReceiptHandle,
    st.integers(0, 2**40),
    st.integers(0, 2**45),
    st.integers(0, 2**40),
    st.integers(0, 999),
    st.sampled_from("012"),
    st.text("abcxyz-_0123456789", min_size=1, max_size=20),
    st.integers(0, 1000),
    st.integers(0, 2**40),
).filter(lambda h: h.offset >= h.start_offset)


@given(handles)
def test_handle_round_trip(handle):
    assert ReceiptHandle.decode(handle.encode()) == handle


def test_handle_layout_is_rocketmqs():
    h = ReceiptHandle.decode("10 1700000000000 30000 3 0 broker-a 2 12")
    assert (h.start_offset, h.pop_time, h.invisible_time, h.revive_qid) == (10, 1700000000000, 30000, 3)
    assert (h.kind, h.broker_name, h.queue_id, h.offset, h.visible_at) == (
        "0",
        "broker-a",
        2,
        12,
        1700000030000,
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1 2 3",
        "1 2 3 4 9 b 0 1",
        "a b c d 0 b 0 1",
        "5 1 1 1 0 b 0 4",
        "1 2 3 4 0  0 1",
        "-1 2 3 4 0 b 0 1",
        "1 2 3 4 0 b 0 99999999999999999999",
    ],
)
def test_bad_handles_are_protocol_errors(text):
    with pytest.raises(ProtocolError):
        ReceiptHandle.decode(text)


@given(st.text(max_size=200))
def test_handle_decoder_raises_only_protocol_error(text):
    with contextlib.suppress(ProtocolError):
        ReceiptHandle.decode(text)


@given(st.binary(max_size=300))
def test_batch_ack_decoder_raises_only_protocol_error(data):
    with contextlib.suppress(ProtocolError):
        decode_batch_ack_body(data)


@given(st.text(max_size=100))
def test_bitset_decoder_raises_only_protocol_error(text):
    with contextlib.suppress(ProtocolError):
        java_bitset_decode(text)


@given(st.integers(0, 2**200))
def test_java_bitset_round_trip(bits):
    assert java_bitset_decode(java_bitset_encode(bits)) == bits


def test_java_bitset_is_little_endian_bytes():
    assert java_bitset_encode(0b1_0000_0001) == "AQE="  # BitSet{0, 8}.toByteArray() = [1, 1]


@given(st.lists(st.integers(0, 63), unique=True))
def test_bitmaps(indexes):
    assert bits_of(sum(1 << i for i in indexes)) == sorted(indexes)


def test_topic_names_and_info_strings():
    assert pop_retry_topic("G", "T") == "%RETRY%G_T"
    assert [topic_type(t) for t in ("T", "%RETRY%G_T", "%RETRY%G+T")] == ["0", "1", "2"]
    assert real_topic("1", "T", "G") == "%RETRY%G_T" and real_topic("0", "T", "G") == "T"
    with pytest.raises(ProtocolError):
        real_topic("7", "T", "G")
    assert start_offset_info([("T", 0, 5), ("%RETRY%G_T", 0, 2)]) == "0 0 5;1 0 2"
    assert msg_offset_info([("T", 1, "5,6,8"), ("%RETRY%G_T", 0, "2")]) == "0 1 5,6,8;1 0 2"


def _record(topic="T", props="TAGS\x01A\x02", body=b"payload", offset=7) -> bytes:
    m = MessageExt(topic=topic, body=body, queue_id=1, queue_offset=offset, reconsume_times=0)
    m.properties = dict(p.split("\x01") for p in props.split("\x02") if p)
    return m.encode()


@pytest.mark.parametrize("topic", ["%RETRY%G_T", "x" * 200])
def test_stamp_adds_the_handle_and_can_show_another_topic(topic):
    raw = _record(topic)
    stamped = stamp_record(raw, "1 2 3 4 1 b 1 7", topic=b"T", reconsume_times=3)
    m = decode_record(stamped, verify_crc=True)
    assert (m.topic, m.body, m.queue_offset, m.reconsume_times) == ("T", b"payload", 7, 3)
    assert m.properties == {"TAGS": "A", POP_CK: "1 2 3 4 1 b 1 7"}


@given(st.binary(max_size=200))
def test_record_layout_raises_only_protocol_error(data):
    with contextlib.suppress(ProtocolError):
        record_layout(data)


@given(st.binary(max_size=200), st.integers(0, 199), st.binary(max_size=3))
def test_stamp_raises_only_protocol_error(data, at, patch):
    raw = bytearray(_record())
    raw[at : at + len(patch)] = patch
    for garbage in (data, bytes(raw)):
        with contextlib.suppress(ProtocolError):
            stamp_record(garbage, "h", topic=b"T", reconsume_times=1)


def test_stamp_keeps_everything_else():
    raw = _record()
    m = decode_record(stamp_record(raw, "1 2 3 4 0 b 1 7"), verify_crc=True)
    assert (m.topic, m.reconsume_times, m.properties) == ("T", 0, {"TAGS": "A", POP_CK: "1 2 3 4 0 b 1 7"})


def test_retry_policies():
    customized = GroupRetryPolicy()
    assert [next_delay_ms(customized, t) for t in (0, 1, 2, 15, 100)] == [
        10_000,
        30_000,
        60_000,
        7_200_000,
        7_200_000,
    ]
    exponential = GroupRetryPolicy(
        type="EXPONENTIAL", exponential_retry_policy=ExponentialRetryPolicy(1000, 10_000, 3)
    )
    assert [next_delay_ms(exponential, t) for t in (0, 1, 2, 3, 50)] == [1000, 3000, 9000, 10_000, 10_000]


def test_revive_records_round_trip_and_refuse_garbage():
    ck = CheckpointRecord("G", "T", 1, 10, 1000, 500, [0, 2, 3], 4, True, 2)
    ack = AckRecord("G", "T", 1, 10, 1000, 0b101, True)
    assert decode("ck", encode(ck)) == ck and decode("ack", encode(ack)) == ack
    for tag, data in (("ck", b"{"), ("ack", b"[]"), ("other", b"{}")):
        with pytest.raises(ProtocolError):
            decode(tag, data)


def test_checkpoint_table_settles_and_expires():
    table = CheckpointTable()
    ck = OpenCheckpoint(CheckpointRecord("G", "T", 0, 10, 1000, 500, [0, 1, 5], 0), 0, 0)
    table.add(ck)
    assert table.low_waters() == {0: 0}
    assert ck.offsets(0b111) == [10, 11, 15] and ck.index_of(15) == 2 and ck.index_of(12) == -1
    assert table.settle(ck.record.key, 0b001) == 0b001
    assert table.settle(ck.record.key, 0b001) == 0  # twice: nothing new
    assert table.due(1499) == [] and table.due(1500) == [ck]
    assert table.settle(ck.record.key, 0b110) == 0b110 and table.get(ck.record.key) is None
    assert table.low_waters() == {}


def _batch_impls():
    from ferrymq.protocol import pop

    impls = [pop.py_stamp_batch]
    if pop.stamp_batch is not pop.py_stamp_batch:
        impls.append(pop.stamp_batch)
    return impls


@pytest.mark.parametrize("stamp_batch", _batch_impls())
@pytest.mark.parametrize(("topic", "times"), [(None, None), (b"Orig", 5)])
def test_stamp_batch_stamps_every_record_of_every_run(stamp_batch, topic, times):
    offsets = [7, 8, 9, 12, 13]  # a filter skipped 10 and 11
    records = [_record(topic="%RETRY%G_T" if topic else "T", body=b"b%d" % o, offset=o) for o in offsets]
    runs = [memoryview(records[0] + records[1]), memoryview(records[2]), memoryview(b"".join(records[3:]))]
    body, relative, joined = stamp_batch(runs, b"9 8 7 6 1 b 1 ", topic, times)
    assert (relative, joined) == ([0, 1, 2, 5, 6], "7,8,9,12,13")
    expected = b"".join(
        stamp_record(r, f"9 8 7 6 1 b 1 {o}", topic=topic, reconsume_times=times)
        for r, o in zip(records, offsets, strict=True)
    )
    assert body == expected


@pytest.mark.parametrize("stamp_batch", _batch_impls())
@given(st.binary(max_size=300), st.integers(0, 250), st.binary(max_size=4))
def test_stamp_batch_raises_only_protocol_error(stamp_batch, data, at, patch):
    raw = bytearray(_record() + _record())
    raw[at : at + len(patch)] = patch
    for garbage in (data, bytes(raw)):
        with contextlib.suppress(ProtocolError):
            stamp_batch([memoryview(garbage)], b"p ", b"T", 1)


@pytest.mark.parametrize(
    ("offsets", "relative", "own", "foreign"),
    [
        ([0, 1, 2], 0b0101, 0b101, 0),  # every offset from the start: the bits are the same
        ([0, 1, 2], 0b1010, 0b010, 0b1000),  # offset 3 is not in it
        ([0, 1, 5], 0b100011, 0b111, 0),  # a filter skipped offsets 2-4
        ([0, 1, 5], 0b000110, 0b010, 0b100),
    ],
)
def test_a_batch_ack_bit_set_maps_onto_the_checkpoint_and_back(offsets, relative, own, foreign):
    ck = OpenCheckpoint(CheckpointRecord("G", "T", 0, 10, 1000, 500, offsets, 0), 0, 0)
    assert ck.own_bits(relative) == (own, foreign)
    assert ck.relative_bits(own) | foreign == relative
