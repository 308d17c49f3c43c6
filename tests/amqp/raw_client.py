"""A blocking AMQP client made of pamqp frames, for tests that need exact frames (against the gateway
and RabbitMQ alike); in-process tests run it in a thread."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from pamqp import body as content_body
from pamqp import commands, frame, heartbeat
from pamqp import header as content_header

from ferrymq.protocol.amqp.frames import PROTOCOL_HEADER

READ_TIMEOUT = 10.0
_SKIPPED = (
    heartbeat.Heartbeat, commands.Basic.Deliver, commands.Basic.GetOk, content_header.ContentHeader,
    content_body.ContentBody,
)  # fmt: skip


class RawClient:
    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=READ_TIMEOUT)
        self.buffer = b""

    def close(self) -> None:
        self.sock.close()

    def read_until_closed(self) -> bytes:
        """Everything until the server closes the socket (reset included), bounded by READ_TIMEOUT."""
        deadline = time.monotonic() + READ_TIMEOUT
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            self.buffer += data
        else:
            pytest.fail(f"still open after {READ_TIMEOUT}s, got {self.buffer!r}")
        data, self.buffer = self.buffer, b""
        return data

    def next_frame(self):
        """The next frame the server sends."""
        deadline = time.monotonic() + READ_TIMEOUT
        while True:
            if len(self.buffer) >= 8:
                size = struct.unpack_from(">I", self.buffer, 3)[0]
                if len(self.buffer) >= size + 8:
                    used, channel, value = frame.unmarshal(self.buffer)
                    self.buffer = self.buffer[used:]
                    return channel, value
            if time.monotonic() >= deadline:
                pytest.fail(f"no whole frame within {READ_TIMEOUT}s: {self.buffer!r}")
            data = self.sock.recv(65536)
            if not data:
                pytest.fail(f"closed before a whole frame: {self.buffer!r}")
            self.buffer += data

    def send(self, channel: int, method) -> None:
        self.sock.sendall(frame.marshal(method, channel))

    def open(
        self,
        heartbeat: int = 0,
        user: str = "guest",
        password: str = "guest",
        capabilities: dict | None = None,
    ) -> None:
        self.sock.sendall(PROTOCOL_HEADER)
        assert isinstance(self.next_frame()[1], commands.Connection.Start)
        properties = {"capabilities": capabilities or {}}
        start_ok = commands.Connection.StartOk(
            client_properties=properties, mechanism="PLAIN", response=f"\0{user}\0{password}"
        )
        self.send(0, start_ok)
        assert isinstance(self.next_frame()[1], commands.Connection.Tune)
        self.send(0, commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=heartbeat))
        self.send(0, commands.Connection.Open(virtual_host="/"))
        assert isinstance(self.next_frame()[1], commands.Connection.OpenOk)

    def close_reply(self) -> tuple[int, str]:
        """(reply code, text) of the connection.close the server sends next (heartbeats skipped)."""
        while True:
            _, value = self.next_frame()
            if isinstance(value, commands.Connection.Close):
                return value.reply_code, value.reply_text

    def expect(self, kind: type, channel: int | None = None):
        """The next frame of type `kind` (on `channel`), skipping heartbeats."""
        while True:
            number, value = self.next_frame()
            if isinstance(value, kind) and (channel is None or number == channel):
                return value
            if not isinstance(value, _SKIPPED):
                pytest.fail(f"expected {kind.__name__}, got {value!r}")

    def publish(self, channel: int, exchange: str, routing_key: str, body: bytes, properties=None) -> None:
        properties = properties or commands.Basic.Properties()
        self.sock.sendall(
            frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), channel)
            + frame.marshal(content_header.ContentHeader(0, len(body), properties), channel)
            + frame.marshal(content_body.ContentBody(body), channel)
        )

    def open_channel(self, channel: int = 1) -> None:
        self.send(channel, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk)

    def declare(self, channel: int, queue: str, **arguments) -> commands.Queue.DeclareOk:
        self.send(channel, commands.Queue.Declare(queue=queue, arguments=arguments or None))
        return self.expect(commands.Queue.DeclareOk)

    def consume(self, channel: int, queue: str, no_ack: bool = False) -> None:
        self.send(channel, commands.Basic.Consume(queue=queue, no_ack=no_ack))
        self.expect(commands.Basic.ConsumeOk)
