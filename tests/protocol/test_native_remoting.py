"""The C remoting codec (ferrymq/_native/remoting.c) against its Python reference: the same commands
from the same bytes, the same bytes from the same commands, the same errors from garbage."""

from __future__ import annotations

import importlib
import json
import struct
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.protocol import remoting
from ferrymq.protocol.codes import LanguageCode, SerializeType
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.remoting import RemotingCommand, py_encode_parts, py_split
from tests.protocol.test_remoting import frame, mutated_frames

native = importlib.import_module("ferrymq._native.remoting")  # built at install; a missing build fails here
if remoting._native is None:
    pytest.skip("FERRYMQ_PURE_PYTHON is set: the codec under test is not bound", allow_module_level=True)

CAP = 1 << 20
TEXT = st.text(max_size=12)
INT32 = st.integers(-(2**31), 2**31 - 1)


def outcome(split, data: bytes):
    """What a splitter makes of `data`: each command's fields (ext_fields' order too), or the error."""
    try:
        commands, pos, needed = split(data, CAP)
    except ProtocolError as e:
        return type(e), str(e)
    fields = [(c, list(c.ext_fields.items()), bytes(c.body), type(c.language)) for c in commands]
    return fields, pos, needed


def same_decoding(data: bytes) -> None:
    assert outcome(native.split, data) == outcome(py_split, data)


@st.composite
def commands(draw):
    binary = draw(st.booleans())
    ints = st.integers(-(2**15), 2**15 - 1) if binary else INT32
    return RemotingCommand(
        draw(ints),
        language=draw(st.sampled_from(LanguageCode)),
        version=draw(ints),
        opaque=draw(INT32),
        flag=draw(INT32),
        remark=draw(st.none() | TEXT),
        ext_fields=draw(st.dictionaries(TEXT, st.none() | TEXT, max_size=6)),
        body=draw(st.binary(max_size=32)),
        serialize_type=SerializeType.ROCKETMQ if binary else SerializeType.JSON,
    )


@settings(max_examples=500, deadline=None)
@given(commands())
def test_encoding_is_byte_exact(command):
    assert native.encode_parts(command) == py_encode_parts(command)
    same_decoding(b"".join(py_encode_parts(command)))


def test_what_the_c_encoder_leaves_to_python():
    """Non-string values, a lone surrogate, an int16 overflow: None, and the caller's Python path."""
    for command in (
        RemotingCommand(1, ext_fields={"n": 5}),  # type: ignore[dict-item]
        RemotingCommand(1, remark="\ud800"),
        RemotingCommand(1 << 20, serialize_type=SerializeType.ROCKETMQ),
    ):
        assert native.encode_parts(command) is None
    assert RemotingCommand(1, ext_fields={"n": 5}).encode() == b"".join(  # type: ignore[dict-item]
        py_encode_parts(RemotingCommand(1, ext_fields={"n": "5"}))
    )


scalars = st.one_of(st.none(), st.booleans(), INT32, st.integers(), st.floats(allow_nan=False), TEXT)
json_values = st.one_of(scalars, st.lists(scalars, max_size=2), st.dictionaries(TEXT, scalars, max_size=2))
header_keys = st.sampled_from(
    ["code", "language", "version", "opaque", "flag", "remark", "extFields", "serializeTypeCurrentRPC"]
)
ext_values = st.one_of(TEXT, st.dictionaries(TEXT, st.one_of(TEXT, scalars), max_size=4), json_values)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(st.one_of(header_keys, TEXT), st.one_of(ext_values, INT32)), max_size=9),
    st.booleans(),
    st.sampled_from([None, 0, 2]),
    st.binary(max_size=8),
)
def test_json_headers_of_any_shape(items, ascii_only, indent, body):
    """Keys repeated, values of every JSON type, escapes, whitespace: both decoders agree."""
    text = "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v, ensure_ascii=ascii_only)}" for k, v in items) + "}"
    if indent:
        text = json.dumps(json.loads(text), indent=indent, ensure_ascii=ascii_only)
    same_decoding(frame(text.encode(), body))


def test_a_plain_frame_is_decoded_in_c():
    """The common headers (the Java and C++ clients', ours) never reach the Python decoder."""
    headers = [
        b'{"code":310,"extFields":{"a":"g","b":"T"},"flag":0,"language":"JAVA","opaque":1,'
        b'"serializeTypeCurrentRPC":"JSON","version":479}',
        b'{"code":11, "language":"CPP", "version":1, "opaque":2, "flag":0, "remark":null,'
        b' "extFields":{"queueId":"3","x":"\\u00e9\\"\\n\\ud83d\\ude00"}}',
        b"{}",
    ]
    calls = []

    def watch(frame, event, arg):
        if event == "call" and frame.f_code is remoting._decode_payload.__code__:
            calls.append(frame)

    sys.setprofile(watch)
    try:
        for header in headers:
            native.split(frame(header, b"body"), CAP)
        with pytest.raises(ProtocolError, match="truncated"):  # a binary header too short: Python says why
            native.split(struct.pack(">iI", 17, 1 << 24 | 13) + b"\0" * 13, CAP)
    finally:
        sys.setprofile(None)
    assert len(calls) == 1  # the short binary header only
    for header in headers:
        same_decoding(frame(header, b"body"))


@settings(max_examples=600, deadline=None)
@given(mutated_frames())
def test_mutated_frames_agree(data):
    same_decoding(data)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64), st.sampled_from([0, 1, 2]))
def test_garbage_headers_agree(header, serialize_type):
    same_decoding(frame(header, b"", serialize_type))
    same_decoding(header)
