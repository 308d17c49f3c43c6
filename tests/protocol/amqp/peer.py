"""A client peer for driving `ServerConnection` with no socket: pamqp encodes what a client sends
and decodes what the server answers."""

from __future__ import annotations

from pamqp import base, commands, frame

from ferrymq.protocol.amqp import events as ev
from ferrymq.protocol.amqp.connection import ServerConnection
from ferrymq.protocol.amqp.frames import PROTOCOL_HEADER


def decode_all(data: bytes) -> list[tuple[int, object]]:
    """Every frame in `data` as (channel, pamqp frame)."""
    frames = []
    while data:
        used, channel, value = frame.unmarshal(data)
        frames.append((channel, value))
        data = data[used:]
    return frames


class Peer:
    def __init__(self, now: float = 0.0, **options) -> None:
        self.now = now
        self.server = ServerConnection(now, **options)
        self.events: list[ev.Event] = []

    def send(self, data: bytes) -> list[tuple[int, object]]:
        """Give the server bytes; return what it answered, decoded (its events go to self.events)."""
        events = self.server.receive_data(data, self.now)
        self.events += events
        replies = b"".join(
            e.reply for e in events if isinstance(e, ev.ChannelClosed)
        )  # as the owner sends them
        return decode_all(self.server.data_to_send() + replies)

    def method(self, channel: int, method: base.Frame) -> list[tuple[int, object]]:
        return self.send(frame.marshal(method, channel))

    def tick(self, now: float) -> list[tuple[int, object]]:
        self.now = now
        self.events += self.server.tick(now)
        return decode_all(self.server.data_to_send())

    def open(self, heartbeat: int = 0, frame_max: int = 131072) -> None:
        """Handshake as guest on vhost "/" up to connection.open-ok."""
        self.send(PROTOCOL_HEADER)
        self.method(0, commands.Connection.StartOk(mechanism="PLAIN", response="\0guest\0guest"))
        login = self.events.pop()
        assert isinstance(login, ev.LoginRequested)
        self.events += self.server.accept_login(login.username, self.now)
        self.method(0, commands.Connection.TuneOk(channel_max=0, frame_max=frame_max, heartbeat=heartbeat))
        self.method(0, commands.Connection.Open(virtual_host="/"))
        vhost = self.events.pop()
        assert isinstance(vhost, ev.VhostRequested)
        self.events += self.server.open_vhost(self.now)
        self.server.data_to_send()
