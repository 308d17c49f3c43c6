"""AMQP frames: the protocol header, and frames of type, channel, size, payload and the frame-end
octet. `FrameReader` cuts a byte stream into frames and checks each the way RabbitMQ does."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ferrymq.protocol.amqp.errors import FramingError, ReplyCode

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_MIN_SIZE = 4096  # every peer accepts frames this large, before and after tuning
FRAME_OVERHEAD = 8  # type, channel, size and frame-end: a body frame carries frame_max - 8 octets

_HEAD = struct.Struct(">BHI")
_HEAD_SIZE = _HEAD.size
_TYPES = frozenset((FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT))
HEARTBEAT_FRAME = _HEAD.pack(FRAME_HEARTBEAT, 0, 0) + bytes((FRAME_END,))


@dataclass(slots=True)  # (not frozen: a frozen dataclass costs a setattr call per field)
class Frame:
    type: int
    channel: int
    payload: bytes


def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    """One frame on the wire."""
    return b"".join((_HEAD.pack(frame_type, channel, len(payload)), payload, b"\xce"))


def frame_error(frame_type: int, detail: str) -> FramingError:
    """RabbitMQ's words for a frame it cannot take: "FRAME_ERROR - type 1, all octets = <<>>: ..."."""
    return FramingError(ReplyCode.FRAME_ERROR, f"type {frame_type}, all octets = <<>>: {detail}")


class FrameReader:
    """Buffers received bytes and hands out whole frames. The payload limit is frame_max - 8
    (RabbitMQ's check); it starts at the server's own frame_max and drops to the negotiated one.
    Frames are read at an offset, and what was read is cut off the buffer once per `feed` (not once
    per frame: a read of many small frames would move the rest of the buffer for each)."""

    def __init__(self, frame_max: int) -> None:
        self._buffer = bytearray()
        self._at = 0  # where the next frame starts
        self.frame_max = frame_max

    def feed(self, data: bytes) -> None:
        if self._at:
            del self._buffer[: self._at]
            self._at = 0
        self._buffer += data

    def read_protocol_header(self) -> bytes | None:
        """The first 8 octets once they have arrived (whatever they are: the caller judges them)."""
        at = self._at
        end = at + len(PROTOCOL_HEADER)
        if len(self._buffer) < end:
            return None
        self._at = end
        return bytes(self._buffer[at:end])

    def read_frame(self) -> Frame | None:
        """The next complete frame, or None until more bytes come.

        Raises FramingError (501 FRAME_ERROR) for an unknown type, an oversized frame or a wrong
        frame-end octet: after any of these the stream cannot be resynchronised."""
        buffer, at = self._buffer, self._at
        if len(buffer) - at < _HEAD_SIZE:
            return None
        frame_type, channel, size = _HEAD.unpack_from(buffer, at)
        if frame_type not in _TYPES:
            raise frame_error(frame_type, "unknown_frame")
        limit = self.frame_max - FRAME_OVERHEAD
        if size > limit:
            raise frame_error(frame_type, f"{{frame_too_large,{size},{limit}}}")
        start = at + _HEAD_SIZE
        end = start + size
        if len(buffer) <= end:
            return None
        if buffer[end] != FRAME_END:
            raise frame_error(frame_type, f"{{invalid_frame_end_marker,{buffer[end]}}}")
        self._at = end + 1
        return Frame(frame_type, channel, bytes(buffer[start:end]))
