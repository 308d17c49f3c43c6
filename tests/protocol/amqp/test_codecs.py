"""The codecs against pamqp as the reference: the hand-written hot-path frames byte for byte, the
cold-path method decoder over every method pamqp knows, field tables over RabbitMQ's type set."""

from __future__ import annotations

import datetime
import decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import body, commands, frame, header

from ferrymq.protocol.amqp import fast
from ferrymq.protocol.amqp.errors import ConnectionException, ReplyCode
from ferrymq.protocol.amqp.fields import decode_properties, decode_table, encode_properties, encode_table
from ferrymq.protocol.amqp.frames import FrameReader
from ferrymq.protocol.amqp.frames import frame as encode_frame
from ferrymq.protocol.amqp.methods import decode_method, encode_method

short = st.text(max_size=40).filter(lambda s: len(s.encode()) <= 255)
names = st.from_regex(r"[A-Za-z0-9_.:-]{0,40}", fullmatch=True)  # what pamqp lets through
tags = st.integers(0, 2**63 - 1)  # pamqp packs longlong signed; the wire field is unsigned


def payload_of(method, channel: int = 1) -> bytes:
    return frame.marshal(method, channel)[7:-1]


@given(names, short, st.booleans(), st.booleans())
def test_publish_decodes_what_pamqp_encodes(exchange, key, mandatory, immediate):
    method = commands.Basic.Publish(
        exchange=exchange, routing_key=key, mandatory=mandatory, immediate=immediate
    )
    assert fast.decode_publish(payload_of(method)) == fast.Publish(exchange, key, mandatory, immediate)


@given(st.integers(1, 65535), short, tags, st.booleans(), names, short)
def test_deliver_encodes_as_pamqp(channel, consumer_tag, delivery_tag, redelivered, exchange, key):
    method = commands.Basic.Deliver(consumer_tag, delivery_tag, redelivered, exchange, key)
    ours = fast.encode_deliver(channel, consumer_tag, delivery_tag, redelivered, exchange, key)
    assert ours == frame.marshal(method, channel)


@given(tags, st.booleans(), st.booleans())
def test_acks_both_ways_as_pamqp(tag, multiple, requeue):
    cases = [
        (commands.Basic.Ack(tag, multiple), fast.Ack(tag, multiple)),
        (commands.Basic.Nack(tag, multiple, requeue), fast.Nack(tag, multiple, requeue)),
        (commands.Basic.Reject(tag, requeue), fast.Reject(tag, requeue)),
    ]
    for theirs, ours in cases:
        assert fast.encode_ack(3, ours) == frame.marshal(theirs, 3)
        assert fast.decode_ack(payload_of(theirs)) == ours


properties = st.builds(
    commands.Basic.Properties,
    content_type=st.none() | short.filter(bool),  # pamqp leaves out empty strings
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | short.filter(bool),
    expiration=st.none() | st.integers(0, 10**9).map(str),
    headers=st.none()
    | st.dictionaries(short.filter(bool), st.integers(-(2**63), 2**63 - 1) | short, max_size=4),
    timestamp=st.none()
    | st.integers(0, 2**32 - 1).map(lambda s: datetime.datetime.fromtimestamp(s, datetime.UTC)),
)


@given(st.integers(1, 65535), properties, st.binary(max_size=20000), st.sampled_from([4096, 8192, 131072]))
def test_content_frames_as_pamqp(channel, props, payload, frame_max):
    expected = frame.marshal(header.ContentHeader(0, len(payload), props), channel)
    step = frame_max - 8
    for start in range(0, len(payload), step):
        expected += frame.marshal(body.ContentBody(payload[start : start + step]), channel)
    assert fast.encode_content(channel, encode_properties(props), payload, frame_max) == expected
    header_payload = frame.marshal(header.ContentHeader(0, len(payload), props), channel)[7:-1]
    class_id, size, raw = fast.decode_content_header(header_payload)
    assert (class_id, size, raw) == (60, len(payload), props.marshal())
    assert decode_properties(raw) == props


def test_delivery_is_deliver_then_content():
    data = fast.encode_delivery(1, "ctag", 7, True, "ex", "rk", b"", b"hello", 4096)
    frames = []
    while data:
        used, _, value = frame.unmarshal(data)
        frames.append(value)
        data = data[used:]
    deliver, content_header, content = frames
    assert (deliver.consumer_tag, deliver.delivery_tag, deliver.redelivered) == ("ctag", 7, True)
    assert content_header.body_size == 5 and content.value == b"hello"


def constructible_methods():
    for cls in commands.INDEX_MAPPING.values():
        try:
            method = cls()
            method.marshal()
        except (TypeError, ValueError):  # needs arguments its defaults do not give
            continue
        yield method


@pytest.mark.parametrize("method", list(constructible_methods()), ids=lambda m: m.name)
def test_every_method_round_trips(method):
    decoded = decode_method(encode_method(0, method)[7:-1])
    assert type(decoded) is type(method)
    assert encode_method(0, decoded) == encode_method(0, method)


def test_truncated_or_padded_arguments_are_frame_errors():
    good = payload_of(commands.Queue.Declare(queue="q", arguments={"x-max-length": 5}))
    for bad in (good[:-1], good + b"\x00", good[:8]):
        with pytest.raises(ConnectionException) as caught:
            decode_method(bad)
        assert caught.value.code == ReplyCode.FRAME_ERROR


# RabbitMQ's field types, each with a value as its parser gives it
RABBITMQ_FIELDS = {
    b"t\x01": True,
    b"b\xff": -1,
    b"B\xff": 255,
    b"s\xff\xfe": -2,
    b"u\xff\xfe": 65534,
    b"I\xff\xff\xff\xfd": -3,
    b"i\xff\xff\xff\xfd": 4294967293,
    b"l\xff\xff\xff\xff\xff\xff\xff\xfc": -4,
    b"f\x3f\xc0\x00\x00": 1.5,
    b"d\x3f\xf8\x00\x00\x00\x00\x00\x00": 1.5,
    b"D\x02\x00\x00\x01\x2c": decimal.Decimal("3.00"),
    b"S\x00\x00\x00\x02hi": "hi",
    b"A\x00\x00\x00\x02b\x01": [1],
    b"T\x00\x00\x00\x00\x00\x00\x00\x01": datetime.datetime.fromtimestamp(1, datetime.UTC),
    b"F\x00\x00\x00\x04\x01kb\x02": {"k": 2},
    b"V": None,
    b"x\x00\x00\x00\x02\x00\x01": bytearray(b"\x00\x01"),
}


@pytest.mark.parametrize("encoded", list(RABBITMQ_FIELDS), ids=lambda e: chr(e[0]))
def test_every_rabbitmq_field_type_decodes(encoded):
    entry = b"\x01k" + encoded
    assert decode_table(len(entry).to_bytes(4, "big") + entry) == (
        4 + len(entry),
        {"k": RABBITMQ_FIELDS[encoded]},
    )


@given(st.integers(-(2**63), 2**63 - 1))
def test_integers_are_encoded_in_types_every_client_reads(value):
    encoded = encode_table({"n": value})
    assert encoded[6:7] in (b"b", b"s", b"I", b"l")  # never pamqp's default u / i
    assert decode_table(encoded)[1] == {"n": value}


def test_frame_reader_waits_for_whole_frames():
    reader = FrameReader(4096)
    data = encode_frame(1, 2, b"abc")
    for byte in data[:-1]:
        reader.feed(bytes([byte]))
        assert reader.read_frame() is None
    reader.feed(data[-1:])
    found = reader.read_frame()
    assert (found.type, found.channel, found.payload) == (1, 2, b"abc")
