"""ServerConnection driven with no socket: handshake, channels, content, heartbeats, closing, and
RabbitMQ's reply codes for each protocol violation (as RabbitMQ 3.10 answers them)."""

from __future__ import annotations

import struct

import pytest
from pamqp import commands, frame, header, heartbeat

from ferrymq.protocol.amqp import events as ev
from ferrymq.protocol.amqp.fast import Ack, Nack, Publish, Reject
from ferrymq.protocol.amqp.fields import encode_table
from ferrymq.protocol.amqp.frames import HEARTBEAT_FRAME, PROTOCOL_HEADER
from tests.protocol.amqp.peer import Peer


def close_of(answer) -> tuple[int, str, int, int]:
    _, method = answer[-1]
    assert isinstance(method, commands.Connection.Close | commands.Channel.Close), answer
    return method.reply_code, method.reply_text, method.class_id, method.method_id


def test_handshake_with_plain():
    peer = Peer()
    ((_, start),) = peer.send(PROTOCOL_HEADER)
    assert isinstance(start, commands.Connection.Start)
    assert start.mechanisms == "PLAIN AMQPLAIN"
    assert start.server_properties["capabilities"]["authentication_failure_close"] is True
    assert peer.method(0, commands.Connection.StartOk(mechanism="PLAIN", response="\0guest\0secret")) == []
    assert peer.events == [ev.LoginRequested("PLAIN", "guest", "secret", {})]
    peer.events.clear()
    ((_, tune),) = [(c, f) for c, f in frame_list(peer.server.accept_login("guest", 0.0), peer)]
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)
    peer.method(0, commands.Connection.TuneOk(channel_max=100, frame_max=65536, heartbeat=30))
    assert peer.method(0, commands.Connection.Open(virtual_host="vh")) == []
    assert peer.events == [ev.VhostRequested("vh")]
    peer.server.open_vhost(0.0)
    ((_, ok),) = peer.send(b"")
    assert isinstance(ok, commands.Connection.OpenOk)
    assert (peer.server.channel_max, peer.server.frame_max, peer.server.heartbeat) == (100, 65536, 30)


def frame_list(events, peer):
    peer.events += events
    return peer.send(b"")


def test_amqplain_credentials():
    peer = Peer()
    peer.send(PROTOCOL_HEADER)
    response = encode_table({"LOGIN": "guest", "PASSWORD": "pw"})[4:]
    peer.method(0, commands.Connection.StartOk(mechanism="AMQPLAIN", response=response.decode()))
    assert peer.events == [ev.LoginRequested("AMQPLAIN", "guest", "pw", {})]


def test_refused_login_is_403_and_the_end():
    peer = Peer()
    peer.send(PROTOCOL_HEADER)
    peer.method(0, commands.Connection.StartOk(mechanism="PLAIN", response="\0guest\0bad"))
    peer.events.clear()
    peer.events += peer.server.refuse_login("PLAIN", 0.0)
    code, text, _, _ = close_of(peer.send(b""))
    assert code == 403
    assert text.startswith("ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN")
    assert peer.server.closed and isinstance(peer.events[-1], ev.ConnectionClosed)


def test_unknown_mechanism_is_503():
    peer = Peer()
    peer.send(PROTOCOL_HEADER)
    code, text, _, _ = close_of(peer.method(0, commands.Connection.StartOk(mechanism="EXTERNAL")))
    assert (code, text) == (503, "COMMAND_INVALID - unknown authentication mechanism 'EXTERNAL'")


@pytest.mark.parametrize(
    "head", [b"AMQP\x00\x00\x09\x02", b"GET / HTTP/1.1\r\n\r\n", b"AMQP\x01\x01\x00\x09"]
)
def test_bad_protocol_header_gets_ours_and_the_end(head):
    peer = Peer()
    peer.events += peer.server.receive_data(head, 0.0)
    assert peer.server.data_to_send() == PROTOCOL_HEADER
    assert peer.server.closed


def test_partial_header_waits():
    peer = Peer()
    assert peer.send(b"AMQP") == []
    assert not peer.server.closed


@pytest.mark.parametrize(("tune", "code"), [((0, 1000, 0), 530), ((0, 1 << 20, 0), 530), ((5000, 0, 0), 530)])
def test_tune_ok_outside_limits_is_530(tune, code):
    peer = Peer()
    peer.send(PROTOCOL_HEADER)
    peer.method(0, commands.Connection.StartOk(response="\0guest\0guest"))
    peer.server.accept_login("guest", 0.0)
    peer.send(b"")
    assert close_of(peer.method(0, commands.Connection.TuneOk(*tune)))[0] == code


def test_vhost_refused_is_530():
    peer = Peer()
    peer.send(PROTOCOL_HEADER)
    peer.method(0, commands.Connection.StartOk(response="\0guest\0guest"))
    peer.server.accept_login("guest", 0.0)
    peer.method(0, commands.Connection.TuneOk(0, 0, 0))
    peer.method(0, commands.Connection.Open(virtual_host="nope"))
    peer.server.refuse_vhost("vhost nope not found", 0.0)
    assert close_of(peer.send(b"")) == (530, "NOT_ALLOWED - vhost nope not found", 10, 40)
    assert not peer.server.closed  # waits for close-ok
    peer.method(0, commands.Connection.CloseOk())
    assert peer.server.closed


def test_channels_open_close_both_ways():
    peer = Peer()
    peer.open()
    ((_, ok),) = peer.method(1, commands.Channel.Open())
    assert isinstance(ok, commands.Channel.OpenOk)
    peer.method(2, commands.Channel.Open())
    ((_, close_ok),) = peer.method(1, commands.Channel.Close(200, "bye", 0, 0))
    assert isinstance(close_ok, commands.Channel.CloseOk)
    # the close-ok travels in the event: the owner sends it after its answers to earlier methods
    assert peer.server.data_to_send() == b""
    assert [type(e) for e in peer.events] == [ev.ChannelOpened, ev.ChannelOpened, ev.ChannelClosed]
    peer.method(1, commands.Channel.Open())  # the number is free again
    from ferrymq.protocol.amqp.errors import ChannelException, ReplyCode

    peer.server.close_channel(2, ChannelException(ReplyCode.NOT_FOUND, "no queue 'q'", 50, 10), 0.0)
    assert close_of(peer.send(b"")) == (404, "NOT_FOUND - no queue 'q'", 50, 10)
    assert peer.method(2, commands.Basic.Qos()) == []  # dropped while closing
    assert peer.method(2, commands.Channel.CloseOk()) == []
    assert peer.events[-1] == ev.ChannelClosed(2)


def test_a_channel_both_sides_close_at_once_ends_at_the_peers_close_ok():
    """As in RabbitMQ: the server answers the peer's close with close-ok and still waits for the
    peer's close-ok to its own close (forgetting the channel earlier made that close-ok a 504)."""
    from ferrymq.protocol.amqp.errors import ChannelException, ReplyCode

    peer = Peer()
    peer.open()
    peer.method(1, commands.Channel.Open())
    peer.server.close_channel(1, ChannelException(ReplyCode.NOT_FOUND, "no queue 'q'", 50, 10), 0.0)
    assert close_of(peer.send(b""))[0] == 404
    ((_, answer),) = peer.method(1, commands.Channel.Close(200, "bye", 0, 0))
    assert isinstance(answer, commands.Channel.CloseOk)
    assert ev.ChannelClosed(1) not in peer.events
    assert peer.method(1, commands.Channel.CloseOk()) == []
    assert peer.events[-1] == ev.ChannelClosed(1)
    ((_, reopened),) = peer.method(1, commands.Channel.Open())
    assert isinstance(reopened, commands.Channel.OpenOk)


def test_flow():
    peer = Peer()
    peer.open()
    peer.method(1, commands.Channel.Open())
    ((_, ok),) = peer.method(1, commands.Channel.Flow(active=True))
    assert isinstance(ok, commands.Channel.FlowOk) and ok.active
    assert close_of(peer.method(1, commands.Channel.Flow(active=False)))[:2] == (
        540,
        "NOT_IMPLEMENTED - active=false",
    )


def test_publish_content_assembly_over_several_frames():
    peer = Peer()
    peer.open(frame_max=4096)
    peer.method(1, commands.Channel.Open())
    body = bytes(range(256)) * 40
    properties = commands.Basic.Properties(content_type="text/plain", headers={"a": 1}, delivery_mode=2)
    data = frame.marshal(commands.Basic.Publish(exchange="x", routing_key="k", mandatory=True), 1)
    data += frame.marshal(header.ContentHeader(0, len(body), properties), 1)
    for start in range(0, len(body), 4088):
        data += frame.marshal(
            __import__("pamqp.body", fromlist=["ContentBody"]).ContentBody(body[start : start + 4088]), 1
        )
    assert peer.send(data) == []
    content = peer.events[-1]
    assert isinstance(content, ev.ContentReceived)
    assert content.publish == Publish("x", "k", True, False)
    assert content.body == body
    assert content.properties == properties.marshal()


def test_confirm_mode_numbers_publishes_from_one():
    peer = Peer()
    peer.open()
    peer.method(1, commands.Channel.Open())
    assert peer.method(1, commands.Confirm.Select()) == []  # the owner answers select-ok
    assert isinstance(peer.events[-1].method, commands.Confirm.Select)
    assert peer.method(1, commands.Confirm.Select(nowait=True)) == []  # again: no reset
    publish = frame.marshal(commands.Basic.Publish(routing_key="k"), 1)
    publish += frame.marshal(header.ContentHeader(0, 0, commands.Basic.Properties()), 1)
    peer.send(publish * 3)
    assert [e.sequence for e in peer.events if isinstance(e, ev.ContentReceived)] == [1, 2, 3]


def test_message_over_the_size_limit_closes_the_channel():
    peer = Peer()
    peer.open()
    peer.method(1, commands.Channel.Open())
    peer.method(1, commands.Basic.Publish(routing_key="k"))
    answer = peer.send(frame.marshal(header.ContentHeader(0, 2**30, commands.Basic.Properties()), 1))
    assert close_of(answer) == (
        406,
        "PRECONDITION_FAILED - message size 1073741824 is larger than configured max size 134217728",
        60,
        40,
    )
    assert peer.send(struct.pack(">BHI", 3, 1, 1) + b"x\xce") == []  # its body is dropped
    assert not peer.server.closed


def test_empty_body_completes_at_the_header():
    peer = Peer()
    peer.open()
    peer.method(1, commands.Channel.Open())
    peer.method(1, commands.Basic.Publish(routing_key="k"))
    peer.send(frame.marshal(header.ContentHeader(0, 0, commands.Basic.Properties()), 1))
    assert isinstance(peer.events[-1], ev.ContentReceived) and peer.events[-1].body == b""


def test_acks_come_as_fast_objects():
    peer = Peer()
    peer.open()
    peer.method(1, commands.Channel.Open())
    peer.method(1, commands.Basic.Ack(5, True))
    peer.method(1, commands.Basic.Nack(6, False, True))
    peer.method(1, commands.Basic.Reject(7, False))
    assert [e.method for e in peer.events[-3:]] == [Ack(5, True), Nack(6, False, True), Reject(7, False)]


def test_other_methods_go_to_the_owner():
    peer = Peer()
    peer.open()
    peer.method(1, commands.Channel.Open())
    peer.method(1, commands.Queue.Declare(queue="q"))
    event = peer.events[-1]
    assert isinstance(event, ev.MethodReceived) and event.method.queue == "q"


def method_frame(channel: int, class_id: int, method_id: int, args: bytes = b"") -> bytes:
    payload = struct.pack(">HH", class_id, method_id) + args
    return struct.pack(">BHI", 1, channel, len(payload)) + payload + b"\xce"


VIOLATIONS = [
    (
        "bad frame end",
        struct.pack(">BHI", 8, 0, 0) + b"\x00",
        501,
        "FRAME_ERROR - type 8, all octets = <<>>: {invalid_frame_end_marker,0}",
    ),
    (
        "unknown frame type",
        struct.pack(">BHI", 7, 0, 0) + b"\xce",
        501,
        "FRAME_ERROR - type 7, all octets = <<>>: unknown_frame",
    ),
    (
        "frame too large",
        struct.pack(">BHI", 1, 0, 200000),
        501,
        "FRAME_ERROR - type 1, all octets = <<>>: {frame_too_large,200000,131064}",
    ),
    (
        "arguments that do not decode",
        method_frame(1, 20, 10, b"\x05"),
        501,
        "FRAME_ERROR - cannot decode <<5>>",
    ),
    (
        "method before channel.open",
        method_frame(5, 60, 10, b"\x00" * 7),
        504,
        "CHANNEL_ERROR - expected 'channel.open'",
    ),
    (
        "header on channel 0",
        frame.marshal(header.ContentHeader(0, 1, commands.Basic.Properties()), 0),
        505,
        "UNEXPECTED_FRAME - type 2, all octets = <<>>",
    ),
    (
        "basic method on channel 0",
        method_frame(0, 60, 10, b"\x00" * 7),
        504,
        "CHANNEL_ERROR - unexpected method in connection state running",
    ),
    (
        "heartbeat on channel 1",
        struct.pack(">BHI", 8, 1, 0) + b"\xce",
        505,
        "UNEXPECTED_FRAME - type 8, all octets = <<>>",
    ),
    ("unknown method", method_frame(0, 99, 99), 540, "NOT_IMPLEMENTED - unknown method class 99 method 99"),
]


@pytest.mark.parametrize(("name", "data", "code", "text"), VIOLATIONS, ids=[v[0] for v in VIOLATIONS])
def test_violations_close_the_connection_as_rabbitmq_does(name, data, code, text):
    peer = Peer()
    peer.open()
    reply_code, reply_text, _, _ = close_of(peer.send(data))
    assert (reply_code, reply_text) == (code, text)
    if code != 501 or "cannot decode" in text:  # a readable stream: wait for close-ok, drop the rest
        assert not peer.server.closed
        assert peer.send(frame.marshal(commands.Channel.Open(), 3)) == []
        peer.method(0, commands.Connection.CloseOk())
    assert peer.server.closed and peer.events[-1].code == code


CHANNEL_VIOLATIONS = [
    (
        "second channel.open",
        frame.marshal(commands.Channel.Open(), 1),
        504,
        "CHANNEL_ERROR - second 'channel.open' seen",
    ),
    (
        "header without publish",
        frame.marshal(header.ContentHeader(0, 1, commands.Basic.Properties()), 1),
        505,
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead",
    ),
    (
        "publish then method",
        frame.marshal(commands.Basic.Publish(), 1) + frame.marshal(commands.Basic.Qos(), 1),
        505,
        "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead",
    ),
    (
        "connection method on a channel",
        frame.marshal(commands.Connection.Open(), 1),
        503,
        "COMMAND_INVALID - unimplemented method",
    ),
]


@pytest.mark.parametrize(
    ("name", "data", "code", "text"), CHANNEL_VIOLATIONS, ids=[v[0] for v in CHANNEL_VIOLATIONS]
)
def test_violations_on_an_open_channel(name, data, code, text):
    peer = Peer()
    peer.open()
    peer.method(1, commands.Channel.Open())
    assert close_of(peer.send(data))[:2] == (code, text)


def test_peer_closes_connection():
    peer = Peer()
    peer.open()
    ((_, ok),) = peer.method(0, commands.Connection.Close(200, "bye", 0, 0))
    assert isinstance(ok, commands.Connection.CloseOk)
    assert peer.events[-1] == ev.ConnectionClosed(200, "bye", True)


def test_close_ok_that_never_comes_ends_the_connection():
    peer = Peer()
    peer.open()
    peer.send(method_frame(0, 99, 99))
    assert peer.server.next_deadline() == pytest.approx(3.0)
    peer.tick(2.9)
    assert not peer.server.closed
    peer.tick(3.0)
    assert peer.server.closed


def test_heartbeats_sent_at_half_the_interval_and_missed_ones_close():
    peer = Peer()
    peer.open(heartbeat=10)
    assert peer.server.next_deadline() == 5.0
    assert peer.tick(4.9) == []
    ((_, beat),) = peer.tick(5.0)
    assert isinstance(beat, heartbeat.Heartbeat)
    peer.now = 15.0
    peer.send(HEARTBEAT_FRAME)  # the client's heartbeat keeps it alive
    peer.tick(30.0)
    assert not peer.server.closed
    peer.tick(35.0)
    assert peer.server.closed
    assert peer.events[-1].text == "missed heartbeats from client, timeout: 10s"


def test_no_heartbeat_when_disabled():
    peer = Peer()
    peer.open(heartbeat=0)
    assert peer.server.next_deadline() is None
    assert peer.tick(10_000.0) == [] and not peer.server.closed


def test_handshake_timeout():
    peer = Peer()
    peer.send(PROTOCOL_HEADER)
    assert peer.server.next_deadline() == 10.0
    peer.tick(10.0)
    assert peer.server.closed
