"""Basic properties (hand-written codec, compared with pamqp byte for byte) and the AMQP <-> RocketMQ
property mapping: exact round trips, readable copies, messages RocketMQ clients wrote, bad input."""

from __future__ import annotations

import base64
import contextlib
import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from ferrymq.protocol.amqp import fields
from ferrymq.protocol.amqp.basic_properties import (
    BasicProperties,
    decode_basic_properties,
    encode_basic_properties,
)
from ferrymq.protocol.amqp.mapping import AMQP_PROPS, from_rocketmq, is_from_amqp, to_rocketmq
from ferrymq.protocol.properties import decode_properties

_short = st.text(max_size=40).filter(lambda s: len(s.encode()) <= 255)
_header_value = st.one_of(
    st.text(max_size=20),
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, width=32),  # pamqp sends floats as 32 bits,
)
_headers = st.dictionaries(st.text(min_size=1, max_size=20), _header_value, max_size=5)
_properties = st.builds(
    BasicProperties,
    content_type=st.none() | _short,
    content_encoding=st.none() | _short,
    headers=st.none() | _headers,
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | _short,
    reply_to=st.none() | _short,
    expiration=st.none() | _short,
    message_id=st.none() | _short,
    timestamp=st.none() | st.integers(0, 0xFFFFFFFF),
    type=st.none() | _short,
    user_id=st.none() | _short,
    app_id=st.none() | _short,
)  # cluster_id (deprecated) pamqp refuses to set: it is in the bytes tests below


def _pamqp(properties: BasicProperties) -> commands.Basic.Properties:
    values = {name: getattr(properties, name) for name in BasicProperties.__slots__}
    values = {name: value for name, value in values.items() if value is not None and value != ""}
    if "type" in values:
        values["message_type"] = values.pop("type")
    if "timestamp" in values:
        values["timestamp"] = datetime.datetime.fromtimestamp(values["timestamp"], tz=datetime.UTC)
    return commands.Basic.Properties(**values)


def _without_empty(properties: BasicProperties) -> BasicProperties:
    """What survives the wire: pamqp (and so we) leave out empty strings."""
    for name in BasicProperties.__slots__:
        if getattr(properties, name) == "":
            setattr(properties, name, None)
    return properties


# -- the basic properties codec ----------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(_properties)
def test_encoding_is_pamqps_and_decoding_reads_pamqps(properties):
    wire = _pamqp(properties).marshal()
    assert encode_basic_properties(properties) == wire
    assert decode_basic_properties(wire) == _without_empty(properties)
    assert fields.decode_properties(wire) == _pamqp(properties)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=255), min_size=4, max_size=4))
def test_short_strings_that_are_not_utf8_come_back_as_they_were(values):
    """content_type, message_id, app_id and cluster_id holding any bytes."""
    flags = (1 << 15 | 1 << 7 | 1 << 3 | 1 << 2).to_bytes(2, "big")
    wire = flags + b"".join(bytes((len(v),)) + v for v in values)
    assert encode_basic_properties(decode_basic_properties(wire)) == wire


_any_value = st.recursive(
    st.one_of(
        _header_value,
        st.decimals(places=2, min_value=0, max_value=10**6, allow_nan=False),
        st.datetimes(timezones=st.just(datetime.UTC), min_value=datetime.datetime(1971, 1, 1)),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(max_size=10), _any_value, max_size=6))
def test_headers_of_any_type_decode_as_pamqp_decodes_them(headers):
    wire = commands.Basic.Properties(headers=headers).marshal()
    assert decode_basic_properties(wire).headers == fields.decode_properties(wire).headers


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=140), st.text(max_size=30), max_size=6))
def test_string_headers_encode_as_pamqp_encodes_them(headers):
    assert (
        encode_basic_properties(BasicProperties(headers=headers))
        == commands.Basic.Properties(headers=headers).marshal()
    )


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=60))
def test_any_headers_table_we_read_pamqp_reads_alike(table):
    """A table we accept (in the fast path or through pamqp) is the table pamqp reads."""
    wire = b"\x20\x00" + len(table).to_bytes(4, "big") + table
    try:
        ours = decode_basic_properties(wire).headers
    except ValueError:
        return
    assert ours == fields.decode_properties(wire).headers


@pytest.mark.parametrize(
    ("wire", "problem"),
    [
        (b"", "shorter than their flag word"),
        (b"\x80", "shorter than their flag word"),
        (b"\x00\x01", "flags no known property"),
        (b"\x00\x02", "flags no known property"),
        (b"\x80\x00\x05ab", "content_type runs past the end"),
        (b"\x80\x00", "content_type runs past the end"),
        (b"\x20\x00\x00\x00\x00\x09\x01a", "headers runs past the end"),
        (b"\x20\x00\x00\x00\x00\x03\x01aS", "a field runs past|bad field table"),
        (b"\x00\x40\x00\x00\x00\x00", "timestamp runs past the end"),
        (b"\x10\x00", "delivery_mode runs past the end"),
        (b"\x00\x00\x00", "1 bytes follow the last basic property"),
    ],
)
def test_malformed_properties_are_value_errors(wire, problem):
    with pytest.raises(ValueError, match=problem):
        decode_basic_properties(wire)


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=80))
def test_any_bytes_decode_or_fail_with_value_error(wire):
    with contextlib.suppress(ValueError):
        decode_basic_properties(wire)
    with contextlib.suppress(ValueError):
        to_rocketmq("x", "k", wire)


@settings(max_examples=500, deadline=None)
@given(_properties, st.data())
def test_damaged_properties_decode_or_fail_with_value_error(properties, data):
    wire = bytearray(encode_basic_properties(properties))
    if data.draw(st.booleans()) and len(wire) > 2:
        del wire[data.draw(st.integers(2, len(wire) - 1)) :]
    else:
        wire[data.draw(st.integers(0, len(wire) - 1))] ^= data.draw(st.integers(1, 255))
    with contextlib.suppress(ValueError):
        decode_basic_properties(bytes(wire))


# -- AMQP -> RocketMQ -> AMQP --------------------------------------------------------------------------

_names = st.text(max_size=30).filter(lambda s: len(s.encode()) <= 255)


@settings(max_examples=400, deadline=None)
@given(_properties, _names, _names)
def test_amqp_messages_come_back_byte_for_byte(properties, exchange, routing_key):
    wire = encode_basic_properties(properties)
    text = to_rocketmq(exchange, routing_key, wire)
    stored = decode_properties(text.encode())  # what a RocketMQ consumer (or the store) parses
    assert is_from_amqp(stored)
    assert from_rocketmq(stored) == (exchange, routing_key, wire)


def test_readable_copies_for_rocketmq_consumers():
    wire = commands.Basic.Properties(
        content_type="application/json",
        content_encoding="gzip",
        message_id="order-17",
        delivery_mode=2,
        headers={
            "traceId": "t-1",
            "retries": 3,
            "urgent": True,
            "ratio": 0.5,
            "when": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
            "nested": {"a": 1},
        },
    ).marshal()
    props = decode_properties(to_rocketmq("orders", "order.created", wire))
    assert base64.b64decode(props.pop(AMQP_PROPS)) == wire
    assert props == {
        "AMQP_EXCHANGE": "orders",
        "AMQP_ROUTING_KEY": "order.created",
        "TAGS": "order.created",
        "KEYS": "order-17",
        "AMQP_CONTENT_TYPE": "application/json",
        "AMQP_CONTENT_ENCODING": "gzip",
        "traceId": "t-1",
        "retries": "3",
        "urgent": "true",
        "ratio": "0.5",
    }


@pytest.mark.parametrize("key", ["", "*", "a||b", "a|b", " padded", "x\x01y"])
def test_a_routing_key_that_is_no_usable_tag_gives_no_tag(key):
    props = decode_properties(to_rocketmq("", key, b"\x00\x00"))
    assert "TAGS" not in props
    assert from_rocketmq(props)[1] == key


def test_headers_named_as_rocketmq_properties_are_not_copied():
    """A header "DELAY" or "TAGS" must not make the broker delay or re-tag the message; "AMQP_PROPS"
    must not replace the stored properties; a value with a separator must not cut the text."""
    headers = {"DELAY": 3, "TAGS": "t", "UNIQ_KEY": "u", "AMQP_PROPS": "x", "cut": "a\x02b", "ok\x01": "v"}
    wire = encode_basic_properties(BasicProperties(headers=headers))
    props = decode_properties(to_rocketmq("", "", wire))
    assert set(props) == {AMQP_PROPS}
    assert from_rocketmq(props) == ("", "", wire)


def test_names_with_separators_travel_base64():
    text = to_rocketmq("ex\x01", "key\x02x", b"\x00\x00")
    props = decode_properties(text)
    assert "AMQP_EXCHANGE" not in props and "AMQP_EXCHANGE_B64" in props
    assert from_rocketmq(props) == ("ex\x01", "key\x02x", b"\x00\x00")


# -- RocketMQ -> AMQP ----------------------------------------------------------------------------------


def test_rocketmq_messages_get_basic_properties_with_their_user_properties():
    props = {"TAGS": "created", "KEYS": "k1 k2", "UNIQ_KEY": "7F00000100002A9F0000000000000001",
             "WAIT": "true", "color": "red", "traceId": "t-9"}  # fmt: skip
    exchange, routing_key, wire = from_rocketmq(props, born_timestamp=1_700_000_000_123)
    assert (exchange, routing_key) == ("", "created")
    read = fields.decode_properties(wire)  # pamqp reads it as any client would
    assert read.headers == {"color": "red", "traceId": "t-9"}
    assert read.delivery_mode == 2
    assert read.message_id == "7F00000100002A9F0000000000000001"
    assert read.timestamp == datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC)
    assert not is_from_amqp(props)


def test_rocketmq_message_id_falls_back_to_keys_then_the_callers():
    assert fields.decode_properties(from_rocketmq({"KEYS": "k1"})[2]).message_id == "k1"
    assert fields.decode_properties(from_rocketmq({"KEYS": "k1"}, message_id="m")[2]).message_id == "m"
    bare = fields.decode_properties(from_rocketmq({})[2])
    assert (bare.message_id, bare.headers, bare.timestamp, bare.delivery_mode) == (None, None, None, 2)


def test_rocketmq_values_over_amqps_limits_are_left_out():
    routing_key, wire = from_rocketmq({"TAGS": "t" * 256, "UNIQ_KEY": "u" * 256, "n" * 256: "v", "ok": "v"})[
        1:
    ]
    read = fields.decode_properties(wire)
    assert (routing_key, read.message_id, read.headers) == ("", None, {"ok": "v"})


@pytest.mark.parametrize("stored", ["not base64!", "AAAA", base64.b64encode(b"\x80\x00\x09ab").decode()])
def test_forged_amqp_properties_are_value_errors(stored):
    with pytest.raises(ValueError):
        from_rocketmq({AMQP_PROPS: stored})
