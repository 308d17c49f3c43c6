"""The stored-message record, batch bodies, properties and ids, byte for byte."""

import contextlib
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.protocol.batch import encode_batch, iter_batch, scan_batch
from ferrymq.protocol.errors import MessageDecodeError, ProtocolError
from ferrymq.protocol.hashes import java_hash
from ferrymq.protocol.message_ext import MessageExt, decode_record, decode_records
from ferrymq.protocol.message_id import offset_msg_id, offset_msg_ids, parse_offset_msg_id
from ferrymq.protocol.properties import decode_properties, encode_properties, find_property
from ferrymq.protocol.record import (
    BLANK,
    CQ_ENTRY,
    MAGIC_V1,
    MAGIC_V2,
    body_crc,
    pack_host,
    read_record_meta,
    unpack_host,
    write_blank,
)


def test_java_hash_matches_java_string_hashcode():
    # Values of String.hashCode() computed by the JVM.
    assert java_hash("") == 0
    assert java_hash("a") == 97
    assert java_hash("TagA") == 2598919
    assert java_hash("hello world") == 1794106052
    assert java_hash("polygenelubricants") == -2147483648
    assert java_hash("é中") == 233 * 31 + 0x4E2D
    assert java_hash("😀") == 0xD83D * 31 + 0xDE00  # a surrogate pair counts as two units


@given(st.text(max_size=300))
def test_java_hash_equals_the_reference_loop(s):
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    assert java_hash(s) == (h - (1 << 32) if h >= 1 << 31 else h)


@pytest.mark.parametrize("length", [0, 1, 638, 639, 640, 5000])
def test_java_hash_at_the_fast_path_length_limits(length):
    text = "".join(chr(33 + i % 94) for i in range(length))
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    assert java_hash(text) == (h - (1 << 32) if h >= 1 << 31 else h)


def test_record_layout_is_byte_exact():
    msg = MessageExt(
        topic="T",
        body=b"hi",
        properties={"TAGS": "a"},
        queue_id=3,
        flag=7,
        queue_offset=11,
        commitlog_offset=1234,
        sys_flag=0,
        born_timestamp=1000,
        born_host=("10.0.0.1", 5000),
        store_timestamp=2000,
        store_host=("10.0.0.2", 10911),
        reconsume_times=2,
        prepared_transaction_offset=99,
    )
    raw = msg.encode()
    props = b"TAGS\x01a\x02"
    expected = (
        struct.pack(">iiiiiqqiq", len(raw), MAGIC_V1, zlib.crc32(b"hi") & 0x7FFFFFFF, 3, 7, 11, 1234, 0, 1000)
        + bytes([10, 0, 0, 1]) + struct.pack(">i", 5000)
        + struct.pack(">q", 2000)
        + bytes([10, 0, 0, 2]) + struct.pack(">i", 10911)
        + struct.pack(">iqi", 2, 99, 2) + b"hi"
        + b"\x01T"
        + struct.pack(">h", len(props)) + props
    )  # fmt: skip
    assert raw == expected
    assert len(raw) == 91 + 2 + 1 + len(props)
    # Positions from the reference: QUEUEOFFSET @20, PHYSICALOFFSET @28, SYSFLAG @36, STORETIMESTAMP @56.
    assert struct.unpack_from(">q", raw, 20)[0] == 11
    assert struct.unpack_from(">q", raw, 28)[0] == 1234
    assert struct.unpack_from(">q", raw, 56)[0] == 2000


def test_long_topic_uses_magic_v2_and_ipv6_hosts_set_flags():
    topic = "t" * 200
    msg = MessageExt(topic=topic, body=b"x", born_host=("::1", 1), store_host=("fe80::2", 2))
    raw = msg.encode()
    assert struct.unpack_from(">i", raw, 4)[0] == MAGIC_V2
    back = decode_record(raw, verify_crc=True)
    assert back.topic == topic
    assert back.born_host == ("::1", 1) and back.store_host == ("fe80::2", 2)
    assert back.sys_flag & 0x30 == 0x30


hosts = st.one_of(
    st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 65535)),
    # inet_ntop's spelling, so a decoded host compares equal to the generated one
    st.tuples(st.ip_addresses(v=6).map(lambda a: unpack_host(a.packed + bytes(4))[0]), st.integers(0, 65535)),
)
prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20)
messages = st.builds(
    MessageExt,
    topic=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=80),
    body=st.binary(max_size=2000),
    properties=st.dictionaries(prop_text.filter(bool), prop_text, max_size=5),
    queue_id=st.integers(0, 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    queue_offset=st.integers(0, 2**63 - 1),
    commitlog_offset=st.integers(0, 2**63 - 1),
    sys_flag=st.sampled_from([0, 0x1, 0x4, 0x8, 0xC]),
    born_timestamp=st.integers(0, 2**62),
    born_host=hosts,
    store_timestamp=st.integers(0, 2**62),
    store_host=hosts,
    reconsume_times=st.integers(0, 1000),
    prepared_transaction_offset=st.integers(0, 2**62),
)


@given(messages)
def test_record_round_trip(msg):
    raw = msg.encode()
    back = decode_record(raw, verify_crc=True)
    back.sys_flag &= ~0x30  # the host-width bits are derived, not chosen
    assert back.store_size == len(raw)
    assert back.body_crc == body_crc(msg.body)
    back.store_size = back.body_crc = 0
    assert back == msg


@given(st.lists(messages, min_size=1, max_size=5))
def test_concatenated_records_decode_in_order(msgs):
    decoded = decode_records(b"".join(m.encode() for m in msgs))
    assert [(m.topic, m.body) for m in decoded] == [(m.topic, m.body) for m in msgs]


def test_crc_mismatch_is_detected():
    raw = bytearray(MessageExt(topic="T", body=b"payload").encode())
    raw[-5] ^= 0xFF  # the last body byte (then topic length, topic "T", properties length)
    decode_record(bytes(raw))  # structure is still fine without the CRC check
    with pytest.raises(MessageDecodeError, match="CRC"):
        decode_record(bytes(raw), verify_crc=True)


def test_blank_record_and_torn_records():
    buf = bytearray(64)
    write_blank(buf, 0, 64)
    assert read_record_meta(buf, 0, 64) is BLANK
    raw = MessageExt(topic="T", body=b"abc").encode()
    for cut in range(len(raw)):
        assert read_record_meta(raw[:cut], 0, cut) is None


@settings(max_examples=500)
@given(st.binary(max_size=400))
def test_decoders_raise_only_protocol_errors_on_garbage(data):
    decoders = (decode_record, decode_records, lambda d: list(iter_batch(d)), scan_batch, decode_properties)
    for decode in decoders:
        with contextlib.suppress(ProtocolError):
            decode(data)


@settings(max_examples=300)
@given(messages, st.integers(0, 10_000), st.integers(0, 255))
def test_mutated_records_never_escape_as_other_errors(msg, where, value):
    raw = bytearray(msg.encode())
    raw[where % len(raw)] = value
    with contextlib.suppress(ProtocolError):
        decode_record(bytes(raw), verify_crc=True)


def test_decode_record_rejects_non_bytes():
    with pytest.raises(MessageDecodeError):
        decode_record("not bytes")


def test_properties_round_trip_and_malformed_pieces_skipped():
    props = {"KEYS": "k1 k2", "TAGS": "TagA", "UNIQ_KEY": "ABC"}
    text = encode_properties(props)
    assert text == "KEYS\x01k1 k2\x02TAGS\x01TagA\x02UNIQ_KEY\x01ABC\x02"
    assert decode_properties(text) == props
    assert decode_properties("a\x011\x02junk\x02\x01x\x02b\x012") == {"a": "1", "b": "2"}
    with pytest.raises(MessageDecodeError):
        decode_properties(b"\xff\xfe")


def test_find_property_matches_whole_keys_only():
    raw = b"XTAGS\x01no\x02TAGS\x01yes\x02"
    assert find_property(raw, b"TAGS\x01") == b"yes"
    assert find_property(raw, b"KEYS\x01") is None
    assert find_property(b"TAGS\x01first\x02", b"TAGS\x01") == b"first"
    tail = b"TAGS\x01last"
    assert find_property(tail, b"TAGS\x01") == b"last"


@given(
    st.lists(st.tuples(st.binary(max_size=300), prop_text.map(str.encode), st.integers(-5, 5)), max_size=6)
)
def test_batch_round_trip(entries):
    body = encode_batch(entries)
    back = [(bytes(b), p, f) for f, b, p in iter_batch(body)]
    assert back == entries


def test_batch_with_bad_lengths_is_rejected():
    good = encode_batch([(b"abc", b"K\x01v\x02", 0)])
    with pytest.raises(MessageDecodeError):
        list(iter_batch(good[:-1]))
    bad = bytearray(good)
    bad[16:20] = struct.pack(">i", 1000)  # body length past the entry
    with pytest.raises(MessageDecodeError):
        list(iter_batch(bytes(bad)))


def test_offset_msg_id_round_trip():
    msg_id = offset_msg_id(pack_host("192.168.0.7", 10911), 123456789)
    assert msg_id == "C0A80007" + "00002A9F" + "00000000075BCD15"
    assert parse_offset_msg_id(msg_id) == ("192.168.0.7", 10911, 123456789)
    assert parse_offset_msg_id(offset_msg_id(pack_host("::1", 9), 5)) == ("::1", 9, 5)
    for bad in ("", "XYZ", "C0A80007" * 3 + "ZZZZZZZZ", 42):
        with pytest.raises(MessageDecodeError):
            parse_offset_msg_id(bad)


@given(
    st.sampled_from([("10.1.2.3", 10911), ("::1", 8080)]), st.lists(st.integers(0, 2**63 - 1), max_size=40)
)
def test_offset_msg_ids_in_bulk_match_one_by_one(host, offsets):
    packed = pack_host(*host)
    entries = b"".join(CQ_ENTRY.pack(o, 100, -1) for o in offsets)
    assert offset_msg_ids(packed, entries) == ",".join(offset_msg_id(packed, o) for o in offsets)
