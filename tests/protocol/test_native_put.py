"""The C put path (ferrymq/_native/put.c) against its Python references: the record writer, the
SEND_MESSAGE_V2 header reader, the property look-up and the send's answer (the store's append:
tests/store)."""

from __future__ import annotations

import importlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ferrymq.broker.processors.send import py_send_answer, send_fields
from ferrymq.protocol.message_id import py_offset_msg_id
from ferrymq.protocol.properties import py_find_property
from ferrymq.protocol.record import pack_host, py_write_record, record_size, topic_block
from ferrymq.protocol.remoting import RemotingCommand, RemotingProtocolError

native = importlib.import_module("ferrymq._native.put")  # built at install; a missing build fails here

ints = st.integers(-(2**31), 2**31 - 1)
longs = st.integers(-(2**63), 2**63 - 1)
hosts = st.sampled_from([pack_host("127.0.0.1", 10911), pack_host("10.1.2.3", 1), pack_host("::1", 8080)])


@settings(max_examples=300)
@given(
    topic=st.one_of(st.sampled_from([b"T", "订单".encode()]), st.binary(min_size=128, max_size=140)),
    queue_id=ints, flag=ints, queue_offset=longs, phys=longs, sys_flag=ints, born=longs, born_host=hosts,
    stored=longs, store_host=hosts, reconsume=ints, prepared=longs, body=st.binary(max_size=300),
    props=st.binary(max_size=80), pos=st.integers(0, 9), as_view=st.booleans(),
)  # fmt: skip
def test_record_writer_writes_what_the_python_one_writes(
    topic, queue_id, flag, queue_offset, phys, sys_flag, born, born_host, stored, store_host, reconsume,
    prepared, body, props, pos, as_view,
):  # fmt: skip
    size = record_size(len(body), len(topic), len(props), len(born_host), len(store_host))
    args = (topic_block(topic), queue_id, flag, queue_offset, phys, sys_flag, born, born_host, stored,
            store_host, reconsume, prepared, memoryview(body) if as_view else body, props)  # fmt: skip
    ours, reference = bytearray(b"\xee" * (pos + size + 3)), bytearray(b"\xee" * (pos + size + 3))
    assert native.write_record(ours, pos, *args) == py_write_record(reference, pos, *args) == size
    assert ours == reference


def test_record_writer_refuses_what_does_not_fit_or_is_out_of_range():
    host = pack_host("127.0.0.1", 1)
    args = [topic_block(b"T"), 0, 0, 0, 0, 0, 0, host, 0, host, 0, 0, b"body", b""]
    size = record_size(4, 1, 0)
    with pytest.raises(ValueError, match="does not fit"):
        native.write_record(bytearray(size - 1), 0, *args)
    with pytest.raises(ValueError, match="does not fit"):
        native.write_record(bytearray(size), 1, *args)
    with pytest.raises(OverflowError, match="queue_id"):
        native.write_record(bytearray(size), 0, args[0], 2**31, *args[2:])
    with pytest.raises(ValueError, match="8 or 20"):
        native.write_record(bytearray(size), 0, *args[:7], b"\0" * 6, *args[8:])
    with pytest.raises(BufferError):
        native.write_record(bytes(size), 0, *args)  # not writable


# Values a header field may carry: plain decimals the fast path reads, and forms it leaves to msgspec.
numbers = st.one_of(
    st.integers(-(2**63) - 2, 2**63 + 1).map(str),
    st.sampled_from(["", "-", "-0", "00", "01", "+1", " 1", "1 ", "1_0", "1.0", "0x1", "١", "2147483648",
                     "-2147483649", "9223372036854775808", "99999999999999999999"]),
)  # fmt: skip
flags = st.sampled_from(["true", "false", "True", "1", "0", "yes", ""])
fields = {
    "a": st.sampled_from(["G", ""]), "b": st.sampled_from(["T", "订单", ""]), "c": st.just("TBW102"),
    "d": numbers, "e": numbers, "f": numbers, "g": numbers, "h": numbers,
    "i": st.sampled_from(["UNIQ_KEY\x01x", ""]), "j": numbers, "k": flags, "l": numbers, "m": flags,
    "n": st.just("broker-a"), "bname": st.just("broker-a"), "producerGroup": st.just("G"), "zz": st.just("x"),
}  # fmt: skip
REQUIRED = "abcdefgh"


@st.composite
def headers(draw) -> dict:
    present = draw(st.sets(st.sampled_from(sorted(fields))))
    if draw(st.booleans()):  # mostly a whole V2 header
        present |= set(REQUIRED)
        present -= {"bname", "producerGroup"} if draw(st.booleans()) else set()
    return {key: draw(fields[key]) for key in sorted(present)}


@settings(max_examples=1500)
@given(headers())
@example({"a": "G", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1700000000000", "h": "0"})
def test_header_reader_reads_what_the_reference_reads(ext):
    try:
        reference = send_fields(ext)
    except RemotingProtocolError:
        reference = None
    ours = native.send_header(ext)
    if ours is not None:  # None: the reference reads it (or names the field at fault)
        assert ours == reference
        assert [type(v) for v in ours] == [type(v) for v in reference]


def test_header_reader_takes_the_sdk_form():
    ext = {"a": "G", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1700000000000", "h": "0",
           "i": "UNIQ_KEY\x01x", "j": "0", "k": "false", "l": "16", "m": "true"}  # fmt: skip
    assert native.send_header(ext) == ("T", 3, "UNIQ_KEY\x01x", 0, 0, 1700000000000, 0, 16, True, "TBW102", 4)
    assert native.send_header({**ext, "e": 3}) is None  # not text: the reference converts it


keys = st.sampled_from([b"TAGS\x01", b"KEYS\x01", b"S\x01", b"", b"\x01"])
pieces = st.sampled_from([b"TAGS", b"XTAGS", b"KEYS", b"S", b"\x01", b"\x02", b"v", b""])
props = st.lists(pieces).map(b"".join)


@settings(max_examples=1000)
@given(props, keys, st.sampled_from([bytes, bytearray]))
def test_property_lookup_finds_what_the_python_one_finds(text, key, kind):
    found = native.find_property(kind(text), key)
    reference = py_find_property(kind(text), key)
    assert found == reference and type(found) is type(reference)


@given(hosts, longs)
def test_offset_message_id_is_the_python_one(host, offset):
    assert native.offset_msg_id(host, offset) == py_offset_msg_id(host, offset)


texts = st.one_of(
    st.sampled_from(["DefaultRegion", "true", "7F0000010001B4AAC2F3A1B2C3D4E5F6"]), st.text(max_size=40)
)


@settings(max_examples=1000)
@given(ints, texts, ints, longs, st.one_of(st.none(), texts), texts, texts)
@example(7, "0A0000010000AB12", 3, 12345, "UNIQ", 'Default"Region', "true")
def test_send_answer_is_the_reference_frame_or_left_to_it(
    opaque, msg_id, queue_id, offset, uniq, region, trace
):
    args = (opaque, msg_id, queue_id, offset, uniq, region, trace)
    ours = native.send_answer(*args)
    plain = all(
        t is None or (t.isascii() and all(" " <= c < "\x7f" and c not in '"\\' for c in t))
        for t in (msg_id, uniq, region, trace)
    )  # fmt: skip
    assert ours == (py_send_answer(*args) if plain else None)


def test_send_answer_decodes_as_the_answer_the_sdk_reads():
    frame = native.send_answer(9, "0A000001", 2, 40, "U1", "DefaultRegion", "false")
    answer = RemotingCommand.decode(frame)
    assert (answer.code, answer.opaque, answer.is_response, answer.remark) == (0, 9, True, None)
    assert answer.ext_fields == {
        "msgId": "0A000001", "queueId": "2", "queueOffset": "40", "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "false", "transactionId": "U1",
    }  # fmt: skip
