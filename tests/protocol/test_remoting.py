"""Remoting frames: both header encodings byte for byte, stream framing, and garbage never crashing."""

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.protocol.codes import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.remoting import MAX_FRAME_SIZE, FrameDecoder, RemotingCommand, RemotingProtocolError

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
TEXT = st.text(max_size=20)
NON_EMPTY_TEXT = st.text(min_size=1, max_size=20)  # the binary form reads empty strings back as absent


@st.composite
def commands(draw, serialize_type=None):
    serialize_type = draw(st.sampled_from(SerializeType)) if serialize_type is None else serialize_type
    binary = serialize_type is SerializeType.ROCKETMQ
    text = NON_EMPTY_TEXT if binary else TEXT
    return RemotingCommand(
        draw(INT16 if binary else INT32),
        language=draw(st.sampled_from(LanguageCode)),
        version=draw(INT16 if binary else INT32),
        opaque=draw(INT32),
        flag=draw(INT32),
        remark=draw(st.none() | text),
        ext_fields=draw(st.dictionaries(text, text, max_size=5)),
        body=draw(st.binary(max_size=64)),
        serialize_type=serialize_type,
    )


def frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), serialize_type << 24 | len(header)) + header + body


# --- Encoding, byte for byte ------------------------------------------------------------------

JSON_FRAME = (
    b"\x00\x00\x00\x6f"  # length: 4 + 104 + 3
    b"\x00\x00\x00\x68"  # JSON, header length 104
    b'{"code":105,"language":"JAVA","version":479,"opaque":7,"flag":1,"remark":"ok","extFields":{"topic":"T"}}'
    b"xyz"
)

BINARY_FRAME = (
    b"\x00\x00\x00\x26"  # length: 4 + 31 + 3
    b"\x01\x00\x00\x1f"  # ROCKETMQ, header length 31
    b"\x00\x0a"  # code 10
    b"\x00"  # JAVA
    b"\x01\xdf"  # version 479
    b"\x00\x00\x00\x07"  # opaque
    b"\x00\x00\x00\x01"  # flag
    b"\x00\x00\x00\x02ok"  # remark
    b"\x00\x00\x00\x08"  # extFields bytes
    b"\x00\x01k\x00\x00\x00\x01v"
    b"xyz"
)


def test_json_frame_is_byte_exact():
    command = RemotingCommand(
        105, language=LanguageCode.JAVA, version=479, opaque=7, flag=1, remark="ok", ext_fields={"topic": "T"}
    )
    command.body = b"xyz"
    assert command.encode() == JSON_FRAME
    assert RemotingCommand.decode(JSON_FRAME) == command


def test_binary_frame_is_byte_exact():
    command = RemotingCommand(
        10,
        language=LanguageCode.JAVA,
        version=479,
        opaque=7,
        flag=1,
        remark="ok",
        ext_fields={"k": "v"},
        body=b"xyz",
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert command.encode() == BINARY_FRAME
    assert RemotingCommand.decode(BINARY_FRAME) == command


def test_json_header_skips_null_remark_and_empty_ext_fields():
    head, body = RemotingCommand(0, opaque=3, flag=RESPONSE_FLAG).encode_parts()
    assert head[8:] == b'{"code":0,"language":"PYTHON","version":479,"opaque":3,"flag":1}'
    assert body == b""


def test_ext_field_values_are_always_written_as_strings():
    command = RemotingCommand(11, ext_fields={"queueId": 0, "suspend": True, "skip": None})  # type: ignore[dict-item]
    for serialize_type in SerializeType:
        command.serialize_type = serialize_type
        assert RemotingCommand.decode(command.encode()).ext_fields == {"queueId": "0", "suspend": "true"}
    command.serialize_type = SerializeType.JSON
    assert b'"extFields":{"queueId":"0","suspend":"true"}' in command.encode()


def test_encode_parts_keeps_the_body_apart():
    body = memoryview(b"0123456789")[2:6]
    head, tail = RemotingCommand(10, body=body).encode_parts()
    assert tail is body
    assert head[:4] == struct.pack(">i", len(head) - 4 + len(body))


def test_binary_header_cannot_carry_a_code_beyond_int16():
    command = RemotingCommand(RequestCode.POP_MESSAGE, serialize_type=SerializeType.ROCKETMQ)
    with pytest.raises(RemotingProtocolError, match="ROCKETMQ"):
        command.encode()
    command.serialize_type = SerializeType.JSON
    assert RemotingCommand.decode(command.encode()).code == RequestCode.POP_MESSAGE


@settings(max_examples=300)
@given(commands())
def test_round_trip(command):
    decoded = RemotingCommand.decode(command.encode())
    if command.serialize_type is SerializeType.ROCKETMQ and command.remark == "":
        command.remark = None
    assert decoded == command


# --- Decoding what real peers send ------------------------------------------------------------


def test_cpp_client_header_with_numbers_in_ext_fields():
    # Exactly what rocketmq==0.4.4 (the C++ client) sends: numbers stay JSON numbers in extFields.
    header = (
        b'{"code":105,"language":"CPP","version":63,"opaque":1,"flag":0,'
        b'"extFields":{"topic":"T","queueId":0}}'
    )
    command = RemotingCommand.decode(frame(header))
    assert command.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
    assert command.language is LanguageCode.CPP
    assert (command.version, command.opaque, command.flag) == (63, 1, 0)
    assert command.ext_fields == {"topic": "T", "queueId": "0"}
    assert command.body == b""
    assert command.serialize_type is SerializeType.JSON


def test_java_header_with_extra_top_level_field():
    header = (
        b'{"code":0,"extFields":{"msgId":"AB","queueId":"1"},"flag":1,"language":"JAVA","opaque":7,'
        b'"remark":null,"serializeTypeCurrentRPC":"JSON","version":479}'
    )
    command = RemotingCommand.decode(frame(header, b"body"))
    assert command.is_response and not command.is_oneway
    assert command.remark is None
    assert command.ext_fields == {"msgId": "AB", "queueId": "1"}
    assert command.body == b"body"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (b"{}", RemotingCommand(0, language=LanguageCode.OTHER, version=0)),
        (b'{"code":34,"language":1}', RemotingCommand(34, language=LanguageCode.CPP, version=0)),
        (b'{"code":34,"language":"KLINGON"}', RemotingCommand(34, language=LanguageCode.OTHER, version=0)),
        (b'{"code":34,"language":99}', RemotingCommand(34, language=LanguageCode.OTHER, version=0)),
        (b'{"code":"34","opaque":"5"}', RemotingCommand(34, LanguageCode.OTHER, version=0, opaque=5)),
        (
            b'{"extFields":{"a":true,"b":false,"c":1.5,"d":null,"e":-7}}',
            RemotingCommand(
                0,
                language=LanguageCode.OTHER,
                version=0,
                ext_fields={"a": "true", "b": "false", "c": "1.5", "e": "-7"},
            ),
        ),
    ],
)
def test_lenient_json_header(header, expected):
    assert RemotingCommand.decode(frame(header)) == expected


def test_binary_header_unknown_language_and_empty_strings():
    header = (
        struct.pack(">hbhii", 10, 42, 1, 2, 0)
        + b"\x00\x00\x00\x00"  # remark: empty means null
        + b"\x00\x00\x00\x0f"
        + b"\x00\x01a\x00\x00\x00\x00"  # empty value: null in Java, dropped
        + b"\x00\x01b\x00\x00\x00\x01c"
    )
    command = RemotingCommand.decode(frame(header, serialize_type=1))
    assert command.language is LanguageCode.OTHER
    assert command.remark is None
    assert command.ext_fields == {"b": "c"}


def test_make_response_copies_opaque_and_serialize_type():
    request = RemotingCommand(
        RequestCode.PULL_MESSAGE, opaque=42, flag=ONEWAY_FLAG, serialize_type=SerializeType.ROCKETMQ
    )
    assert request.is_oneway and not request.is_response
    response = request.make_response(ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", {"minOffset": "0"})
    assert response.is_response and not response.is_oneway
    assert (response.code, response.opaque, response.serialize_type) == (19, 42, SerializeType.ROCKETMQ)
    assert response.remark == "OFFSET_OVERFLOW_ONE"
    assert response.ext_fields == {"minOffset": "0"}
    assert RemotingCommand.decode(response.encode()) == response


# --- Stream framing ---------------------------------------------------------------------------


def three_commands() -> list[RemotingCommand]:
    return [
        RemotingCommand(RequestCode.SEND_MESSAGE, opaque=1, ext_fields={"topic": "T"}, body=b"a" * 100),
        RemotingCommand(RequestCode.HEART_BEAT, opaque=2, serialize_type=SerializeType.ROCKETMQ),
        RemotingCommand(0, opaque=1, flag=RESPONSE_FLAG, remark="done"),
    ]


def test_several_frames_in_one_feed():
    expected = three_commands()
    decoder = FrameDecoder()
    assert decoder.feed(b"".join(c.encode() for c in expected)) == expected
    assert decoder.buffered == 0


def test_one_byte_at_a_time():
    expected = three_commands()
    stream = b"".join(c.encode() for c in expected)
    decoder = FrameDecoder()
    got = []
    for i in range(len(stream)):
        got += decoder.feed(stream[i : i + 1])
        assert decoder.buffered == len(stream[: i + 1]) - sum(len(c.encode()) for c in got)
    assert got == expected


@given(st.lists(commands(), min_size=1, max_size=5), st.data())
def test_any_split_gives_the_same_commands(expected, data):
    stream = b"".join(c.encode() for c in expected)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder = FrameDecoder()
    got = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got += decoder.feed(memoryview(stream)[start:end])
    for command in expected:
        if command.serialize_type is SerializeType.ROCKETMQ and command.remark == "":
            command.remark = None
    assert got == expected
    assert decoder.buffered == 0


def test_body_is_a_view_of_the_fed_bytes():
    data = RemotingCommand(10, body=b"payload").encode()
    (command,) = FrameDecoder().feed(data)
    assert isinstance(command.body, memoryview)
    assert command.body.obj is data


def test_a_reused_caller_buffer_cannot_change_a_body():
    buffer = bytearray(RemotingCommand(10, body=b"payload").encode())
    (command,) = FrameDecoder().feed(buffer)
    buffer[-7:] = b"XXXXXXX"
    assert command.body == b"payload"


def test_oversize_frame_rejected_as_soon_as_its_length_arrives():
    decoder = FrameDecoder(max_frame_size=1024)
    assert decoder.feed(b"\x00\x00") == []
    with pytest.raises(RemotingProtocolError, match="exceeds"):
        decoder.feed(struct.pack(">i", 2000)[2:])
    with pytest.raises(RemotingProtocolError, match="exceeds"):
        FrameDecoder().feed(struct.pack(">i", MAX_FRAME_SIZE - 3))


def test_frame_of_exactly_the_cap_is_accepted():
    command = RemotingCommand(10, body=b"x" * 1000)
    data = command.encode()
    assert FrameDecoder(max_frame_size=len(data)).feed(data) == [command]
    with pytest.raises(RemotingProtocolError):
        FrameDecoder(max_frame_size=len(data) - 1).feed(data)


@pytest.mark.parametrize("length", [-1, -(2**31), 0, 3])
def test_negative_or_short_length(length):
    with pytest.raises(RemotingProtocolError, match="shorter"):
        FrameDecoder().feed(struct.pack(">i", length) + b"\x00" * 8)


FIXED = struct.pack(">hbhii", 1, 0, 0, 0, 0)  # binary header: code, language, version, opaque, flag
NO_REMARK = b"\x00\x00\x00\x00"


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (struct.pack(">iI", 6, 3) + b"{}", "header length"),
        (struct.pack(">iI", 6, 2 << 24 | 2) + b"{}", "serialize type 2"),
        (frame(b"{"), "JSON"),
        (frame(b"\xff\xfe"), "JSON"),
        (frame(b"[]"), "JSON"),
        (frame(b'{"code":"abc"}'), "code"),
        (frame(b'{"code":4294967296}'), "code"),
        (frame(b'{"language":[1]}'), "language"),
        (frame(b'{"extFields":[]}'), "extFields"),
        (frame(b'{"extFields":{"a":{"b":1}}}'), "extFields"),
        (frame(b'{"remark":5}'), "remark"),
        (frame(b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"), "JSON"),
        (frame(b"\x00\x0a\x00", serialize_type=1), "truncated"),
        (frame(FIXED + b"\xff\xff\xff\xff", serialize_type=1), "remark length"),
        (frame(FIXED + b"\x00\x00\x00\x01\xff" + b"\x00" * 4, serialize_type=1), "UTF-8"),
        (frame(FIXED + NO_REMARK + b"\x00\x00\x00\x09", serialize_type=1), "extFields"),
        (frame(FIXED + NO_REMARK + b"\x00\x00\x00\x03\x00\x05a", serialize_type=1), "key length"),
        (frame(FIXED + b"\x00\x00\x00\x09", serialize_type=1), "truncated"),
        (
            frame(FIXED + NO_REMARK + b"\x00\x00\x00\x07\x00\x01a\xff\xff\xff\xff", serialize_type=1),
            "value length",
        ),
        (
            frame(FIXED + NO_REMARK + b"\x00\x00\x00\x08\x00\x01a\x00\x00\x00\x02b", serialize_type=1),
            "value length",
        ),
    ],
)
def test_malformed_frames(data, match):
    with pytest.raises(RemotingProtocolError, match=match):
        FrameDecoder().feed(data)


def test_decode_requires_one_whole_frame():
    data = RemotingCommand(10).encode()
    with pytest.raises(RemotingProtocolError):
        RemotingCommand.decode(data + b"x")
    with pytest.raises(RemotingProtocolError):
        RemotingCommand.decode(data[:-1])


# --- Fuzzing: only ProtocolError may escape ---------------------------------------------------


def feed_all(chunks) -> None:
    decoder = FrameDecoder(max_frame_size=1 << 16)
    with contextlib.suppress(ProtocolError):
        for chunk in chunks:
            decoder.feed(chunk)


@settings(max_examples=500)
@given(st.lists(st.binary(max_size=64), max_size=6))
def test_random_bytes_never_crash(chunks):
    feed_all(chunks)


@st.composite
def mutated_frames(draw):
    data = bytearray(draw(commands()).encode())
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif data:
            del data[at]
    return bytes(data)


@settings(max_examples=1000)
@given(mutated_frames(), st.integers(1, 16))
def test_mutated_frames_never_crash(data, step):
    feed_all(data[i : i + step] for i in range(0, len(data), step))
    with contextlib.suppress(ProtocolError):
        RemotingCommand.decode(data)
