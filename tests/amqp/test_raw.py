"""Raw bytes against the gateway and, where it runs, the machine's RabbitMQ: a wrong protocol header,
malformed and unexpected frames, missed heartbeats. Both must answer alike."""

from __future__ import annotations

import struct
import time

import pytest
from pamqp import commands, frame, header

from ferrymq.protocol.amqp.frames import PROTOCOL_HEADER
from tests.amqp.raw_client import RawClient


@pytest.fixture(params=["gateway", "rabbitmq"])
def target(request) -> tuple[str, int]:
    where = request.getfixturevalue(request.param)
    return where.host, where.port


# (not the AMQP 0-9 or 0-8 headers: RabbitMQ still speaks those)
@pytest.mark.parametrize(
    "head", [b"AMQP\x00\x00\x09\x02", b"GET / HTTP/1.1\r\n\r\n", b"AMQP\x00\x01\x00\x00"]
)
def test_bad_protocol_header_gets_amqp_0_9_1_and_a_close(target, head):
    client = RawClient(*target)
    try:
        client.sock.sendall(head)
        assert client.read_until_closed() == PROTOCOL_HEADER
    finally:
        client.close()


def method_frame(channel: int, class_id: int, method_id: int, args: bytes = b"") -> bytes:
    payload = struct.pack(">HH", class_id, method_id) + args
    return struct.pack(">BHI", 1, channel, len(payload)) + payload + b"\xce"


def content_header(channel: int) -> bytes:
    return frame.marshal(header.ContentHeader(0, 1, commands.Basic.Properties()), channel)


MALFORMED = {
    "bad frame end": (struct.pack(">BHI", 8, 0, 0) + b"\x00", 501, "{invalid_frame_end_marker,0}"),
    "unknown frame type": (struct.pack(">BHI", 7, 0, 0) + b"\xce", 501, "unknown_frame"),
    "frame too large": (
        struct.pack(">BHI", 1, 0, 200000) + b"x" * 200001,
        501,
        "{frame_too_large,200000,131064}",
    ),
    "arguments that do not decode": (method_frame(1, 20, 10, b"\x05"), 501, "cannot decode <<5>>"),
    "method before channel.open": (method_frame(5, 60, 10, b"\x00" * 7), 504, "expected 'channel.open'"),
    "header on channel 0": (content_header(0), 505, "UNEXPECTED_FRAME - type 2"),
    "heartbeat on channel 1": (struct.pack(">BHI", 8, 1, 0) + b"\xce", 505, "type 8, all octets = <<>>"),
    "basic method on channel 0": (
        method_frame(0, 60, 10, b"\x00" * 7),
        504,
        "unexpected method in connection",
    ),
    "second channel.open": (frame.marshal(commands.Channel.Open(), 1), 504, "second 'channel.open' seen"),
    "content header without publish": (content_header(1), 505, "expected method frame, got non method frame"),
    "publish then a method": (
        frame.marshal(commands.Basic.Publish(routing_key="ferrymq-none"), 1)
        + frame.marshal(commands.Basic.Qos(), 1),
        505,
        "expected content header for class 60, got non content header frame instead",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_or_unexpected_frames_close_the_connection(target, case):
    data, code, text = MALFORMED[case]
    client = RawClient(*target)
    try:
        client.open()
        client.send(1, commands.Channel.Open())
        assert isinstance(client.next_frame()[1], commands.Channel.OpenOk)
        client.sock.sendall(data)
        reply_code, reply_text = client.close_reply()
        assert reply_code == code and text in reply_text, reply_text
    finally:
        client.close()


def test_missed_heartbeats_end_the_connection(target):
    client = RawClient(*target)
    try:
        client.open(heartbeat=1)
        started = time.monotonic()
        received = client.read_until_closed()  # the server's heartbeats, then the end
        assert received.startswith(b"\x08\x00\x00\x00\x00\x00\x00\xce")
        assert time.monotonic() - started >= 1.0
    finally:
        client.close()


def test_clean_close(target):
    client = RawClient(*target)
    try:
        client.open()
        client.send(0, commands.Connection.Close(200, "bye", 0, 0))
        assert isinstance(client.next_frame()[1], commands.Connection.CloseOk)
    finally:
        client.close()


def test_clean_close_ends_the_socket(gateway):
    """RabbitMQ leaves closing the socket after close-ok to the client; the gateway does not wait."""
    client = RawClient(gateway.host, gateway.port)
    try:
        client.open()
        client.send(0, commands.Connection.Close(200, "bye", 0, 0))
        assert isinstance(client.next_frame()[1], commands.Connection.CloseOk)
        assert client.read_until_closed() == b""
    finally:
        client.close()
