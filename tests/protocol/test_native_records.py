"""The C consumer decoder (ferrymq/_native/records.c) against its Python reference."""

from __future__ import annotations

import importlib

from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.message_ext import MessageExt, _records_c, py_decode_records

importlib.import_module("ferrymq._native.records")  # built at install; a missing build fails here
assert _records_c is not None

hosts = st.sampled_from([("127.0.0.1", 10911), ("10.1.2.3", 1), ("::1", 8080), ("fe80::1", 65535)])
ints = st.integers(-(2**31), 2**31 - 1)
longs = st.integers(-(2**63), 2**63 - 1)
messages = st.builds(
    MessageExt,
    topic=st.one_of(st.sampled_from(["T", "订单"]), st.text("xy", min_size=128, max_size=140)),
    body=st.binary(max_size=64),
    properties=st.dictionaries(st.text("abcK", min_size=1, max_size=4), st.text(max_size=6), max_size=3),
    queue_id=ints, flag=ints, queue_offset=longs, commitlog_offset=longs, sys_flag=st.integers(0, 0xF),
    born_timestamp=longs, born_host=hosts, store_timestamp=longs, store_host=hosts, reconsume_times=ints,
    prepared_transaction_offset=longs,
)  # fmt: skip


def _outcome(decode, raw: bytes, verify: bool):
    try:
        return [(m.topic, m.body, m.properties, *(getattr(m, f) for f in _INTS)) for m in decode(raw, verify)]
    except MessageDecodeError:
        return MessageDecodeError


_INTS = ("queue_id", "flag", "queue_offset", "commitlog_offset", "sys_flag", "born_timestamp", "born_host",
         "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset", "body_crc",
         "store_size")  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(messages, max_size=5), st.integers(0, 2000), st.integers(0, 255), st.booleans())
def test_decoders_agree(msgs, flip_at, flip, verify):
    raw = b"".join(m.encode() for m in msgs)
    variants = [raw, raw[: flip_at % (len(raw) + 1)]]
    if raw:
        corrupt = bytearray(raw)
        corrupt[flip_at % len(raw)] ^= flip
        variants.append(bytes(corrupt))
    for data in variants:
        assert _outcome(_records_c.decode_records, data, verify) == _outcome(py_decode_records, data, verify)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_raises_only_decode_errors(data):
    assert _outcome(_records_c.decode_records, data, True) == _outcome(py_decode_records, data, True)


def test_decoded_messages_are_real_message_objects():
    msg = MessageExt("T", b"body", {"TAGS": "a", "UNIQ_KEY": "K"}, store_size=0)
    (back,) = _records_c.decode_records(msg.encode(), True)
    assert type(back) is MessageExt and back.tags == "a" and back.msg_id == "K"
    back.properties = {"x": "y"}
    assert back.properties == {"x": "y"}
