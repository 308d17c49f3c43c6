"""A lean AMQP 0-9-1 client for moving messages: cold methods (handshake, declare, qos, consume) through
pamqp, and the hot path (deliver in, publish out, acks and confirms) with the hand-written codecs, the
properties kept in wire form so a message crosses byte for byte. Everything one read brings in is
handled before the callers' `after_read` hooks run, so they can answer a whole read with one write."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from pamqp import base, commands

from ferrymq.protocol.amqp import fast
from ferrymq.protocol.amqp.errors import AMQPError
from ferrymq.protocol.amqp.frames import (
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    PROTOCOL_HEADER,
)
from ferrymq.protocol.amqp.methods import decode_method, encode_method

FRAME_MAX = 131072  # RabbitMQ's default; asked for, and lowered to what the server allows
CONNECT_TIMEOUT = 15.0
_DELIVER = (fast.BASIC << 16) | fast.DELIVER
_ACK = (fast.BASIC << 16) | fast.ACK
_NACK = (fast.BASIC << 16) | fast.NACK
_RETURN = (fast.BASIC << 16) | 50
_CANCEL = (fast.BASIC << 16) | 30
_CHANNEL_CLOSE = (20 << 16) | 40
_CONNECTION_CLOSE = (10 << 16) | 50
_IDS = struct.Struct(">HH")
_HEAD = struct.Struct(">BHI")
_TAG_BITS = struct.Struct(">QB")
_BODY_SIZE = struct.Struct(">Q")
_DELIVER_IDS = _IDS.pack(fast.BASIC, fast.DELIVER)
_HEADER_FIXED = 12  # a content header's class id, weight and body size, before the properties


class WireError(Exception):
    """The peer refused something or went away; the text says what and where."""


@dataclass(frozen=True)
class AMQPURL:
    host: str
    port: int
    username: str
    password: str
    vhost: str

    @classmethod
    def parse(cls, url: str) -> AMQPURL:
        """amqp://user:pass@host:port/vhost (the vhost URL-encoded; none or "/" means "/")."""
        parts = urlsplit(url)
        if parts.scheme != "amqp" or not parts.hostname:
            raise WireError(f"'{url}' is not an amqp://user:password@host:port/vhost URL")
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        return cls(
            host=parts.hostname,
            port=parts.port or 5672,
            username=unquote(parts.username or "guest"),
            password=unquote(parts.password or "guest"),
            vhost=unquote(path) or "/",
        )

    def __str__(self) -> str:
        return f"{self.host}:{self.port} vhost '{self.vhost}'"


def _short_str(data: bytes, offset: int) -> int:
    return offset + 1 + data[offset]


class Channel:
    """One channel: `call` for methods with a reply, and hooks for deliveries, confirms and returns."""

    def __init__(self, connection: Connection, number: int) -> None:
        self.connection = connection
        self.number = number
        self.on_deliver: Callable[[int, bool, bytes, bytes], None] | None = None
        self.on_confirm: Callable[[int, bool, bool], None] | None = None
        self.on_return: Callable[[str], None] | None = None
        self.on_cancel: Callable[[], None] | None = None
        self.closed: BaseException | None = None
        self._reply: asyncio.Future[base.Frame] | None = None
        self._lock = asyncio.Lock()
        # the delivery being assembled: tag, redelivered, properties, body size, body parts
        self._tag = 0
        self._redelivered = False
        self._properties = b""
        self._size = 0
        self._parts: list[bytes] = []
        self._received = 0
        self._returning: str | None = None

    async def call(self, method: base.Frame, timeout: float = 30.0) -> base.Frame:
        """Send `method` and wait for its reply (one call at a time on a channel)."""
        async with self._lock:
            if self.closed is not None:
                raise WireError(str(self.closed))
            self._reply = asyncio.get_running_loop().create_future()
            self.connection.write(encode_method(self.number, method))
            try:
                return await asyncio.wait_for(self._reply, timeout)
            except TimeoutError:
                raise WireError(f"{self.connection.url}: no answer to {method.name} in {timeout} s") from None
            finally:
                self._reply = None

    def write(self, data: bytes) -> None:
        self.connection.write(data)

    async def close(self, text: str = "done") -> None:
        """Close the channel (RabbitMQ requeues what it delivered here and was not acknowledged)."""
        if self.closed is None:
            await self.call(commands.Channel.Close(200, text, 0, 0))
            self._fail(WireError("channel closed"))
        self.connection.channels.pop(self.number, None)

    def _fail(self, error: BaseException) -> None:
        if self.closed is None:
            self.closed = error
        if self._reply is not None and not self._reply.done():
            self._reply.set_exception(error)

    def _method(self, payload: bytes) -> None:
        class_id, method_id = _IDS.unpack_from(payload)
        index = (class_id << 16) | method_id
        if index == _DELIVER:
            offset = _short_str(payload, 4)  # consumer tag
            self._tag, bits = _TAG_BITS.unpack_from(payload, offset)
            self._redelivered = bool(bits & 1)
            self._returning = None
        elif index in (_ACK, _NACK):
            tag, bits = _TAG_BITS.unpack_from(payload, 4)
            if self.on_confirm is not None:
                self.on_confirm(tag, bool(bits & 1), index == _ACK)
        else:
            self._cold(decode_method(payload))

    def _cold(self, method: base.Frame) -> None:
        if isinstance(method, commands.Basic.Return):
            self._returning = f"{method.reply_code} {method.reply_text}"
        elif isinstance(method, commands.Basic.Cancel):
            if self.on_cancel is not None:
                self.on_cancel()
        elif isinstance(method, commands.Channel.Close):
            self.connection.write(encode_method(self.number, commands.Channel.CloseOk()))
            self._fail(
                WireError(f"{self.connection.url}: channel closed: {method.reply_code} {method.reply_text}")
            )
            self.connection.channels.pop(self.number, None)
        elif self._reply is not None and not self._reply.done():
            self._reply.set_result(method)

    def _header(self, payload: bytes) -> None:
        (self._size,) = _BODY_SIZE.unpack_from(payload, 4)
        self._properties = payload[12:]
        self._parts = []
        self._received = 0
        if self._size == 0:
            self._complete()

    def _body(self, payload: bytes) -> None:
        self._parts.append(payload)
        self._received += len(payload)
        if self._received >= self._size:
            self._complete()

    def _complete(self) -> None:
        body = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
        if self._returning is not None:
            if self.on_return is not None:
                self.on_return(self._returning)
            self._returning = None
        elif self.on_deliver is not None:
            self.on_deliver(self._tag, self._redelivered, self._properties, body)


class Connection(asyncio.Protocol):
    """One client connection; `open` does the handshake."""

    def __init__(self, url: AMQPURL) -> None:
        self.url = url
        self.frame_max = FRAME_MAX
        self.channels: dict[int, Channel] = {}
        self.after_read: list[Callable[[], None]] = []
        self.server_properties: dict[str, Any] = {}
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._zero = Channel(self, 0)
        self._next = 1

    @classmethod
    async def open(cls, url: str | AMQPURL, name: str = "ferrymq migrate") -> Connection:
        where = url if isinstance(url, AMQPURL) else AMQPURL.parse(url)
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(lambda: cls(where), where.host, where.port), CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError) as e:
            raise WireError(f"cannot connect to {where}: {e or 'timed out'}") from None
        try:
            await connection._handshake(name)
        except BaseException:
            connection.abort()
            raise
        return connection

    async def _handshake(self, name: str) -> None:
        zero, url = self._zero, self.url
        zero._reply = asyncio.get_running_loop().create_future()
        self.write(PROTOCOL_HEADER)
        start = await self._await(zero, "connection.start")
        if not isinstance(start, commands.Connection.Start):
            raise WireError(f"{url}: expected connection.start, got {start.name}")
        self.server_properties = dict(start.server_properties or {})
        capabilities: dict[str, Any] = {
            "publisher_confirms": True, "consumer_cancel_notify": True, "basic.nack": True,
            "connection.blocked": True, "authentication_failure_close": True,
        }  # fmt: skip
        zero._reply = asyncio.get_running_loop().create_future()
        self.write(
            encode_method(
                0,
                commands.Connection.StartOk(
                    client_properties={
                        "product": "ferrymq migrate",
                        "connection_name": name,
                        "capabilities": capabilities,
                    },
                    mechanism="PLAIN",
                    response=f"\0{url.username}\0{url.password}",
                ),
            )
        )
        tune = await self._await(zero, "connection.tune (login refused?)")
        if isinstance(tune, commands.Connection.Close):
            raise WireError(f"{url}: login as '{url.username}' refused: {tune.reply_text}")
        if not isinstance(tune, commands.Connection.Tune):
            raise WireError(f"{url}: expected connection.tune, got {tune.name}")
        if tune.frame_max:
            self.frame_max = min(FRAME_MAX, tune.frame_max)
        self.write(encode_method(0, commands.Connection.TuneOk(tune.channel_max, self.frame_max, 0)))
        opened = await zero.call(commands.Connection.Open(virtual_host=url.vhost))
        if not isinstance(opened, commands.Connection.OpenOk):
            raise WireError(
                f"{url}: cannot open vhost '{url.vhost}': {getattr(opened, 'reply_text', opened)}"
            )

    async def _await(self, zero: Channel, what: str) -> base.Frame:
        assert zero._reply is not None
        try:
            return await asyncio.wait_for(zero._reply, CONNECT_TIMEOUT)
        except TimeoutError:
            raise WireError(f"{self.url}: no {what} in {CONNECT_TIMEOUT} s") from None
        finally:
            zero._reply = None

    async def channel(self) -> Channel:
        number, self._next = self._next, self._next + 1
        channel = self.channels[number] = Channel(self, number)
        await channel.call(commands.Channel.Open())
        return channel

    def write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    async def close(self) -> None:
        """Close politely (bounded), then drop the socket."""
        if self._transport is None or self._transport.is_closing():
            return
        with contextlib.suppress(WireError, AMQPError, ConnectionError):
            await self._zero.call(commands.Connection.Close(200, "bye", 0, 0), timeout=5.0)
        self.abort()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # -- asyncio.Protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        error = WireError(f"connection to {self.url} lost" + (f": {exc}" if exc else ""))
        for channel in [self._zero, *self.channels.values()]:
            channel._fail(error)
        if not self.lost.done():
            self.lost.set_result(None)

    def data_received(self, data: bytes) -> None:
        """Every whole frame of the buffer, cut in one pass (the buffer is trimmed once per read)."""
        buffer = self._buffer
        buffer += data
        at, size_of, limit = 0, len(buffer), self.frame_max - FRAME_OVERHEAD
        channels, zero = self.channels, self._zero
        try:
            while size_of - at > _HEAD.size:
                frame_type, number, size = _HEAD.unpack_from(buffer, at)
                end = at + _HEAD.size + size
                if end >= size_of:
                    break
                if size > limit or buffer[end] != FRAME_END:
                    raise WireError(f"{self.url} sent a malformed frame (type {frame_type}, {size} octets)")
                if frame_type == FRAME_METHOD and buffer[at + 7 : at + 11] == _DELIVER_IDS:
                    whole = self._whole_delivery(buffer, at, end, size_of, limit, number)
                    if whole:
                        at = whole
                        continue
                payload = bytes(buffer[at + _HEAD.size : end])
                at = end + 1
                channel = channels.get(number) if number else zero
                if channel is None:
                    continue
                if frame_type == FRAME_BODY:
                    channel._body(payload)
                elif frame_type == FRAME_HEADER:
                    channel._header(payload)
                elif frame_type == FRAME_METHOD:
                    if number:
                        channel._method(payload)
                    else:
                        self._connection_method(payload)
        except (WireError, AMQPError, ValueError, struct.error) as e:
            self.connection_lost(e if isinstance(e, WireError) else WireError(f"{self.url}: {e}"))
            self.abort()
            return
        finally:
            del buffer[:at]
        for hook in self.after_read:
            hook()

    def _whole_delivery(
        self, buffer: bytearray, at: int, end: int, size_of: int, limit: int, number: int
    ) -> int:
        """A basic.deliver method frame (at `at`, its payload ending at `end`) whose content header and
        single body frame (none for an empty body) are in the buffer too: handed to the channel's
        consumer in one step, without a payload copy per frame. Where the next frame starts, or 0
        when they are not all here (or something is odd): the frames are then taken one by one."""
        channel = self.channels.get(number)
        if channel is None or channel.on_deliver is None:
            return 0
        header = end + 1
        if size_of - header <= _HEAD.size + _HEADER_FIXED:
            return 0
        kind, on, size = _HEAD.unpack_from(buffer, header)
        header_end = header + _HEAD.size + size
        if kind != FRAME_HEADER or on != number or size > limit or header_end >= size_of:
            return 0
        if buffer[header_end] != FRAME_END or size < _HEADER_FIXED:
            return 0
        (body_size,) = _BODY_SIZE.unpack_from(buffer, header + _HEAD.size + 4)
        after = header_end + 1
        body = b""
        if body_size:
            if size_of - after <= _HEAD.size:
                return 0
            kind, on, size = _HEAD.unpack_from(buffer, after)
            body_end = after + _HEAD.size + size
            if kind != FRAME_BODY or on != number or size != body_size or body_end >= size_of:
                return 0
            if buffer[body_end] != FRAME_END:
                return 0
            body = bytes(buffer[after + _HEAD.size : body_end])
            after = body_end + 1
        tag_at = at + _HEAD.size + 5 + buffer[at + _HEAD.size + 4]  # past the consumer tag
        if tag_at + _TAG_BITS.size > end:  # a consumer tag longer than its frame
            return 0
        tag, bits = _TAG_BITS.unpack_from(buffer, tag_at)
        channel._returning = None
        properties = bytes(buffer[header + _HEAD.size + _HEADER_FIXED : header_end])
        channel.on_deliver(tag, bool(bits & 1), properties, body)
        return after

    def _connection_method(self, payload: bytes) -> None:
        method = decode_method(payload)
        if isinstance(method, commands.Connection.Close):
            self.write(encode_method(0, commands.Connection.CloseOk()))
            error = WireError(f"{self.url} closed the connection: {method.reply_code} {method.reply_text}")
            if self._zero._reply is not None and not self._zero._reply.done():
                self._zero._reply.set_result(method)  # during the handshake: the caller explains
            for channel in self.channels.values():
                channel._fail(error)
            self.abort()
        elif isinstance(method, commands.Connection.Blocked | commands.Connection.Unblocked):
            pass  # the socket's own back-pressure holds us
        else:
            self._zero._cold(method)
