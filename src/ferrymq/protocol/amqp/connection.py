"""The server side of one AMQP 0-9-1 connection as a state machine (the h11 style): feed it received
bytes and the time, take the bytes to send and the events. It owns the handshake, channel
bookkeeping, content assembly, heartbeats and closing; it has no socket and no clock."""

from __future__ import annotations

import enum
from typing import Any

from pamqp import base, commands

from ferrymq.protocol.amqp import events as ev
from ferrymq.protocol.amqp import fast
from ferrymq.protocol.amqp.content import ContentAssembler
from ferrymq.protocol.amqp.errors import (
    AMQPError,
    ChannelException,
    ConnectionException,
    FramingError,
    ReplyCode,
)
from ferrymq.protocol.amqp.frames import (
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_MIN_SIZE,
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    Frame,
    FrameReader,
)
from ferrymq.protocol.amqp.login import MECHANISMS, credentials
from ferrymq.protocol.amqp.methods import decode_method, encode_method, ids_of, method_ids

CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}
HANDSHAKE_TIMEOUT = 10.0  # seconds from the first byte to connection.open (RabbitMQ's default)
CLOSE_OK_TIMEOUT = 3.0  # seconds to wait for close-ok after sending connection.close
_ACKS = frozenset((fast.ACK, fast.NACK, fast.REJECT))
_CONNECTION_CLASS = 10


class State(enum.Enum):
    HEADER = "header"
    START_OK = "start-ok"
    LOGIN = "login"  # the owner is checking the credentials
    TUNE_OK = "tune-ok"
    OPEN_METHOD = "open"
    VHOST = "vhost"  # the owner is checking the vhost
    OPEN = "running"
    CLOSING = "closing"  # connection.close sent, waiting for close-ok
    CLOSED = "closed"


_HANDSHAKE: dict[State, tuple[type[base.Frame], str]] = {
    State.START_OK: (commands.Connection.StartOk, "connection.start_ok"),
    State.TUNE_OK: (commands.Connection.TuneOk, "connection.tune_ok"),
    State.OPEN_METHOD: (commands.Connection.Open, "connection.open"),
}


class _Channel:
    __slots__ = ("closing", "confirmed", "content")

    def __init__(self) -> None:
        self.closing = False
        self.confirmed: int | None = None  # in confirm mode: the number of publishes so far
        self.content = ContentAssembler()


class ServerConnection:
    """One client connection as the server sees it."""

    def __init__(
        self,
        now: float,
        *,
        server_properties: dict[str, Any] | None = None,
        frame_max: int = 131072,
        channel_max: int = 2047,
        heartbeat: int = 60,
    ) -> None:
        self.state = State.HEADER
        self.server_frame_max = frame_max
        self.server_channel_max = channel_max
        self.server_heartbeat = heartbeat
        self.frame_max = frame_max
        self.channel_max = channel_max
        self.heartbeat = 0
        self.vhost = ""
        self.username = ""
        self.client_properties: dict = {}
        self._properties = {"capabilities": CAPABILITIES, "product": "ferrymq", **(server_properties or {})}
        self._reader = FrameReader(frame_max)
        self._out: list[bytes] = []
        self._events: list[ev.Event] = []
        self._channels: dict[int, _Channel] = {}
        self._last_received = self._last_sent = now
        self._deadline: float | None = now + HANDSHAKE_TIMEOUT

    # --- what the owner calls -------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    def data_to_send(self) -> bytes:
        data = b"".join(self._out)
        self._out.clear()
        return data

    def receive_data(self, data: bytes, now: float) -> list[ev.Event]:
        """Take bytes from the peer; return the events they make."""
        if self.state is State.CLOSED:
            return []
        if data:
            self._last_received = now
            self._reader.feed(data)
        try:
            self._process(now)
        except ConnectionException as e:
            self._fail(e, now)
        return self._take_events()

    def tick(self, now: float) -> list[ev.Event]:
        """Let time pass: send a heartbeat when one is due, end the connection when the peer has been
        silent for two heartbeat intervals, the handshake took too long, or close-ok never came."""
        if self.state is State.CLOSED:
            return []
        if self._deadline is not None and now >= self._deadline:
            what = "close-ok" if self.state is State.CLOSING else "handshake"
            self._terminate(ReplyCode.CONNECTION_FORCED, f"{what} timeout", by_peer=False)
        elif self.heartbeat and self.state is State.OPEN:
            if now - self._last_received >= 2 * self.heartbeat:
                self._terminate(
                    ReplyCode.CONNECTION_FORCED,
                    f"missed heartbeats from client, timeout: {self.heartbeat}s",
                    False,
                )
            elif now - self._last_sent >= self.heartbeat / 2:
                self._send(HEARTBEAT_FRAME, now)
        return self._take_events()

    def next_deadline(self) -> float | None:
        """When tick() must run next (None: only when data comes)."""
        if self.state is State.CLOSED:
            return None
        times = [self._deadline] if self._deadline is not None else []
        if self.heartbeat and self.state is State.OPEN:
            times += [self._last_sent + self.heartbeat / 2, self._last_received + 2 * self.heartbeat]
        return min(times) if times else None

    def accept_login(self, username: str, now: float) -> list[ev.Event]:
        """The credentials of LoginRequested are good: go on with tune."""
        self._expect_state(State.LOGIN)
        self.username = username
        self.state = State.TUNE_OK
        tune = commands.Connection.Tune(self.server_channel_max, self.server_frame_max, self.server_heartbeat)
        self.send_method(0, tune, now)
        return self.receive_data(b"", now)

    def refuse_login(self, mechanism: str, now: float) -> list[ev.Event]:
        """The credentials are bad: RabbitMQ's 403, then the socket closes."""
        self._expect_state(State.LOGIN)
        reason = (
            f"Login was refused using authentication mechanism {mechanism}. "
            "For details see the broker logfile."
        )
        self._fail(ConnectionException(ReplyCode.ACCESS_REFUSED, reason), now)
        return self._take_events()

    def open_vhost(self, now: float) -> list[ev.Event]:
        """The vhost of VhostRequested exists and the user may use it."""
        self._expect_state(State.VHOST)
        self.state = State.OPEN
        self._deadline = None
        self.send_method(0, commands.Connection.OpenOk(), now)
        return self.receive_data(b"", now)

    def refuse_vhost(self, reason: str, now: float) -> list[ev.Event]:
        """No such vhost, or no access to it: 530 NOT_ALLOWED (RabbitMQ: "vhost X not found")."""
        self._expect_state(State.VHOST)
        self._fail(ConnectionException(ReplyCode.NOT_ALLOWED, reason, 10, 40), now)
        return self._take_events()

    def paused(self, now: float) -> None:
        """The owner did not read from the peer until `now` on purpose (a blocked publisher): the
        silence does not count as missed heartbeats."""
        self._last_received = max(self._last_received, now)

    def accept_secret(self, now: float) -> None:
        """The secret of SecretUpdated is good (a refused one closes the connection)."""
        self.send_method(0, commands.Connection.UpdateSecretOk(), now)

    def send_method(self, channel: int, method: base.Frame, now: float) -> None:
        self._send(encode_method(channel, method), now)

    def send_frames(self, data: bytes, now: float) -> None:
        """Frames already encoded (the fast codecs' output)."""
        self._send(data, now)

    def close_channel(self, channel: int, error: ChannelException, now: float) -> None:
        """Close `channel` because of `error` (channel.close; the channel ends at close-ok)."""
        state = self._channels.get(channel)
        if state is None or state.closing or self.state is not State.OPEN:
            return
        state.closing = True
        state.content.reset()
        close = commands.Channel.Close(error.code, error.reply_text, error.class_id, error.method_id)
        self.send_method(channel, close, now)

    def close(self, error: AMQPError, now: float) -> list[ev.Event]:
        """Close the whole connection because of `error` (or with 320 CONNECTION_FORCED on shutdown)."""
        if self.state is not State.CLOSED:
            self._fail(error, now)
        return self._take_events()

    # --- inside ------------------------------------------------------------------------------

    def _expect_state(self, state: State) -> None:
        if self.state is not state:
            raise RuntimeError(f"connection is in state {self.state.value}, not {state.value}")

    def _send(self, data: bytes, now: float) -> None:
        self._out.append(data)
        self._last_sent = now

    def _take_events(self) -> list[ev.Event]:
        taken, self._events = self._events, []
        return taken

    def _terminate(self, code: int, text: str, by_peer: bool) -> None:
        self.state = State.CLOSED
        self._deadline = None
        self._events.append(ev.ConnectionClosed(code, text, by_peer))

    def _fail(self, error: AMQPError, now: float) -> None:
        """Send connection.close; before tuning or on a broken stream the socket closes at once, else
        close-ok is awaited."""
        if self.state is State.CLOSED:
            return
        if self.state is State.CLOSING:
            if isinstance(error, FramingError):
                self._terminate(error.code, error.reply_text, by_peer=False)
            return
        close = commands.Connection.Close(error.code, error.reply_text, error.class_id, error.method_id)
        self.send_method(0, close, now)
        if isinstance(error, FramingError) or self.state in (State.HEADER, State.START_OK, State.LOGIN):
            self._terminate(error.code, error.reply_text, by_peer=False)
        else:
            self.state = State.CLOSING
            self._close_error = error
            self._deadline = now + CLOSE_OK_TIMEOUT

    def _process(self, now: float) -> None:
        if self.state is State.HEADER:
            header = self._reader.read_protocol_header()
            if header is None:
                return
            if header != PROTOCOL_HEADER:  # RabbitMQ answers with the header it speaks, then hangs up
                self._send(PROTOCOL_HEADER, now)
                self._terminate(ReplyCode.FRAME_ERROR, f"bad protocol header {header!r}", by_peer=False)
                return
            self.state = State.START_OK
            start = commands.Connection.Start(
                server_properties=self._properties, mechanisms=" ".join(MECHANISMS), locales="en_US"
            )
            self.send_method(0, start, now)
        while self.state not in (State.LOGIN, State.VHOST, State.CLOSED):
            frame = self._reader.read_frame()
            if frame is None:
                return
            if self.state is State.CLOSING:
                self._closing_frame(frame, now)
            elif self.state is State.OPEN:
                self._open_frame(frame, now)
            else:
                self._handshake_frame(frame, now)

    def _closing_frame(self, frame: Frame, now: float) -> None:
        """After our connection.close only close and close-ok count; everything else is dropped."""
        if frame.type != FRAME_METHOD or frame.channel != 0:
            return
        try:
            method = decode_method(frame.payload)
        except ConnectionException:
            return
        if isinstance(method, commands.Connection.Close):
            self.send_method(0, commands.Connection.CloseOk(), now)
        if isinstance(method, commands.Connection.Close | commands.Connection.CloseOk):
            error = self._close_error
            self._terminate(error.code, error.reply_text, by_peer=False)

    def _handshake_frame(self, frame: Frame, now: float) -> None:
        if frame.type == FRAME_HEARTBEAT:
            return
        if frame.type != FRAME_METHOD or frame.channel != 0:
            raise ConnectionException(ReplyCode.UNEXPECTED_FRAME, f"type {frame.type} during the handshake")
        method = decode_method(frame.payload)
        if isinstance(method, commands.Connection.Close):
            self.send_method(0, commands.Connection.CloseOk(), now)
            self._terminate(method.reply_code or 0, method.reply_text or "", by_peer=True)
            return
        expected, name = _HANDSHAKE[self.state]
        if not isinstance(method, expected):
            raise ConnectionException(ReplyCode.COMMAND_INVALID, f"expected '{name}'", *ids_of(method))
        if isinstance(method, commands.Connection.StartOk):
            self._start_ok(method)
        elif isinstance(method, commands.Connection.TuneOk):
            self._tune_ok(method)
        elif isinstance(method, commands.Connection.Open):
            self.vhost = method.virtual_host
            self.state = State.VHOST
            self._events.append(ev.VhostRequested(method.virtual_host))

    def _start_ok(self, method: commands.Connection.StartOk) -> None:
        if method.mechanism not in MECHANISMS:
            raise ConnectionException(
                ReplyCode.COMMAND_INVALID, f"unknown authentication mechanism '{method.mechanism}'"
            )
        self.client_properties = method.client_properties or {}
        found = credentials(method.mechanism, method.response)
        self.state = State.LOGIN
        if found is None:  # the owner refuses it like a wrong password
            found = ("", "\x00")
        self._events.append(ev.LoginRequested(method.mechanism, *found, self.client_properties))

    def _tune_ok(self, method: commands.Connection.TuneOk) -> None:
        frame_max = method.frame_max or self.server_frame_max
        if frame_max < FRAME_MIN_SIZE:
            raise ConnectionException(
                ReplyCode.NOT_ALLOWED, f"frame_max={frame_max} < {FRAME_MIN_SIZE} min size"
            )
        if frame_max > self.server_frame_max:
            raise ConnectionException(
                ReplyCode.NOT_ALLOWED, f"frame_max={frame_max} > {self.server_frame_max} max size"
            )
        channel_max = method.channel_max or self.server_channel_max
        if channel_max > self.server_channel_max:
            raise ConnectionException(
                ReplyCode.NOT_ALLOWED, f"channel_max={channel_max} > {self.server_channel_max} max channels"
            )
        self.frame_max = self._reader.frame_max = frame_max
        self.channel_max = channel_max
        self.heartbeat = method.heartbeat  # the client's answer is the agreed value
        self.state = State.OPEN_METHOD

    def _open_frame(self, frame: Frame, now: float) -> None:
        if frame.type == FRAME_HEARTBEAT:
            if frame.channel != 0:
                raise ConnectionException(ReplyCode.UNEXPECTED_FRAME, "type 8, all octets = <<>>")
            return
        if frame.channel == 0:
            self._connection_frame(frame, now)
            return
        channel = self._channels.get(frame.channel)
        if channel is None:
            self._unopened_channel_frame(frame, now)
        elif channel.closing:
            self._closing_channel_frame(frame, channel, now)
        elif channel.content.publish is None and frame.type != FRAME_METHOD:
            raise ConnectionException(
                ReplyCode.UNEXPECTED_FRAME, "expected method frame, got non method frame instead"
            )
        else:
            try:
                if channel.content.publish is not None:
                    self._content_frame(frame, channel)
                else:
                    self._channel_method(frame, channel, now)
            except ChannelException as e:
                self.close_channel(frame.channel, e, now)

    def _connection_frame(self, frame: Frame, now: float) -> None:
        if frame.type != FRAME_METHOD:
            raise ConnectionException(ReplyCode.UNEXPECTED_FRAME, f"type {frame.type}, all octets = <<>>")
        method = decode_method(frame.payload)
        if isinstance(method, commands.Connection.Close):
            self.send_method(0, commands.Connection.CloseOk(), now)
            self._terminate(method.reply_code or 0, method.reply_text or "", by_peer=True)
        elif isinstance(method, commands.Connection.UpdateSecret):
            secret = method.new_secret
            text = secret.decode(errors="replace") if isinstance(secret, bytes) else str(secret)
            self._events.append(ev.SecretUpdated(text, method.reason or ""))
        elif ids_of(method)[0] != _CONNECTION_CLASS:
            raise ConnectionException(
                ReplyCode.CHANNEL_ERROR, "unexpected method in connection state running", *ids_of(method)
            )
        else:
            raise ConnectionException(
                ReplyCode.NOT_IMPLEMENTED, f"{method.name.lower()} is not implemented", *ids_of(method)
            )

    def _unopened_channel_frame(self, frame: Frame, now: float) -> None:
        if frame.type != FRAME_METHOD:
            raise ConnectionException(
                ReplyCode.UNEXPECTED_FRAME, "expected method frame, got non method frame instead"
            )
        method = decode_method(frame.payload)
        if not isinstance(method, commands.Channel.Open):
            raise ConnectionException(ReplyCode.CHANNEL_ERROR, "expected 'channel.open'", *ids_of(method))
        if frame.channel > self.channel_max:
            raise ConnectionException(
                ReplyCode.NOT_ALLOWED,
                f"channel number {frame.channel} is above the negotiated channel_max ({self.channel_max})",
                20,
                10,
            )
        self._channels[frame.channel] = _Channel()
        self.send_method(frame.channel, commands.Channel.OpenOk(), now)
        self._events.append(ev.ChannelOpened(frame.channel))

    def _closing_channel_frame(self, frame: Frame, channel: _Channel, now: float) -> None:
        """After our channel.close only close and close-ok count on that channel; it ends at the
        peer's close-ok (as in RabbitMQ), also when the peer closed it at the same time."""
        if frame.type != FRAME_METHOD:
            return
        class_id, method_id = method_ids(frame.payload)
        if class_id != 20 or method_id not in (40, 41):
            return
        if method_id == 40:  # both sides closed at once: answer, and still wait for its close-ok
            self.send_method(frame.channel, commands.Channel.CloseOk(), now)
            return
        del self._channels[frame.channel]
        self._events.append(ev.ChannelClosed(frame.channel))

    def _content_frame(self, frame: Frame, channel: _Channel) -> None:
        whole = channel.content.take(frame)
        if whole is not None:
            sequence = 0
            if channel.confirmed is not None:
                sequence = channel.confirmed = channel.confirmed + 1
            self._events.append(ev.ContentReceived(frame.channel, *whole, sequence))

    def _channel_method(self, frame: Frame, channel: _Channel, now: float) -> None:
        class_id, method_id = method_ids(frame.payload)
        if class_id == fast.BASIC and (method_id == fast.PUBLISH or method_id in _ACKS):
            try:
                if method_id == fast.PUBLISH:
                    channel.content.start(fast.decode_publish(frame.payload))
                else:
                    self._events.append(ev.MethodReceived(frame.channel, fast.decode_ack(frame.payload)))
            except ValueError:
                raise ConnectionException(
                    ReplyCode.FRAME_ERROR, "cannot decode", class_id, method_id
                ) from None
            return
        method = decode_method(frame.payload)
        if isinstance(method, commands.Channel.Open):
            raise ConnectionException(ReplyCode.CHANNEL_ERROR, "second 'channel.open' seen", 20, 10)
        if isinstance(method, commands.Channel.Close):
            del self._channels[frame.channel]
            close_ok = encode_method(frame.channel, commands.Channel.CloseOk())
            self._events.append(ev.ChannelClosed(frame.channel, close_ok))
        elif isinstance(method, commands.Channel.Flow):
            if not method.active:
                raise ConnectionException(ReplyCode.NOT_IMPLEMENTED, "active=false", 20, 20)
            self.send_method(frame.channel, commands.Channel.FlowOk(active=True), now)
        elif isinstance(method, commands.Confirm.Select):
            if channel.confirmed is None:  # publishes from here on are numbered
                channel.confirmed = 0
            # the owner answers select-ok, after what the channel's earlier publishes send (returns)
            self._events.append(ev.MethodReceived(frame.channel, method))
        elif class_id in (_CONNECTION_CLASS, 20):
            raise ConnectionException(ReplyCode.COMMAND_INVALID, "unimplemented method", class_id, method_id)
        else:
            self._events.append(ev.MethodReceived(frame.channel, method))
