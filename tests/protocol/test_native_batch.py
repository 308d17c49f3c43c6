"""The C batch writer (ferrymq/_native/batch.c) against its Python reference, byte for byte."""

from __future__ import annotations

import importlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.protocol.batch import (
    _c_scan_batch,
    _c_write_batch_records,
    batch_records_size,
    encode_batch,
    py_encode_batch,
    py_scan_batch,
    py_write_batch_records,
)
from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.record import topic_block

importlib.import_module("ferrymq._native.batch")  # built at install; a missing build fails here

props = st.one_of(
    st.just(b""),
    st.builds(lambda tag: f"TAGS\x01{tag}\x02".encode(), st.text(max_size=8)),
    st.builds(
        lambda tag, k: f"KEYS\x01{k}\x02TAGS\x01{tag}\x02".encode(), st.text(max_size=8), st.text(max_size=5)
    ),
    st.just(b"XTAGS\x01no\x02"),
)
entries = st.lists(
    st.tuples(st.binary(max_size=300), props, st.integers(-(2**31), 2**31 - 1)), min_size=1, max_size=10
)


@settings(max_examples=300, deadline=None)
@given(entries, st.sampled_from(["T", "订单", "x" * 130]), st.sampled_from([8, 20]), st.sampled_from([8, 20]))
def test_records_and_entries_agree(batch, topic, born_len, store_len):
    body = encode_batch(batch)
    assert body == py_encode_batch(batch)
    block = topic_block(topic.encode())
    born, store = bytes(range(born_len)), bytes(range(100, 100 + store_len))
    size = batch_records_size(len(body), len(batch), block, born, store)
    assert _c_scan_batch(body) == py_scan_batch(body)
    outs = [bytearray(size + 16), bytearray(size + 16)]
    args = (16, body, len(batch), block, 3, 7, 5 << 32, 0x30, 1234, born, 5678, store)
    assert _c_write_batch_records(outs[0], *args) == py_write_batch_records(outs[1], *args)
    assert outs[0] == outs[1]


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_scan_agrees_on_garbage(data):
    try:
        expected = py_scan_batch(data)
    except MessageDecodeError as e:
        with pytest.raises(MessageDecodeError, match=str(e)):
            _c_scan_batch(data)
    else:
        assert _c_scan_batch(data) == expected


def test_writer_refuses_a_buffer_too_small():
    body = encode_batch([(b"x" * 100, b"", 0)])
    with pytest.raises(ValueError):
        _c_write_batch_records(bytearray(50), 0, body, 1, b"\x01T", 0, 0, 0, 0, 0, b"\0" * 8, 0, b"\0" * 8)


def test_encoder_refuses_what_a_batch_cannot_hold():
    with pytest.raises(ValueError):
        encode_batch([(b"x", b"p" * 40_000, 0)])
    with pytest.raises(TypeError):
        encode_batch([(b"x", b"", 0, 1)])
    with pytest.raises(TypeError):
        encode_batch([("text", b"", 0)])
