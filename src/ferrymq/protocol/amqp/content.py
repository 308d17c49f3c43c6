"""Assembling the content of basic.publish on one channel: after the method, one content header
frame, then body frames until the header's body size is reached (RabbitMQ's checks and texts)."""

from __future__ import annotations

from ferrymq.protocol.amqp import fast
from ferrymq.protocol.amqp.errors import ChannelException, ConnectionException, ReplyCode
from ferrymq.protocol.amqp.frames import FRAME_BODY, FRAME_HEADER, Frame

MAX_MESSAGE_SIZE = 128 * 1024 * 1024  # RabbitMQ's default max_message_size


def _unexpected(reason: str) -> ConnectionException:
    return ConnectionException(ReplyCode.UNEXPECTED_FRAME, reason, fast.BASIC, fast.PUBLISH)


class ContentAssembler:
    __slots__ = ("_body", "_expected", "_properties", "publish")

    def __init__(self) -> None:
        self.publish: fast.Publish | None = None  # a publish waiting for its content
        self._properties: bytes | None = None  # ... whose header has come
        self._expected = 0
        self._body: list[bytes] = []

    def start(self, publish: fast.Publish) -> None:
        self.publish = publish

    def reset(self) -> None:
        self.publish = self._properties = None
        self._body = []

    def take(self, frame: Frame) -> tuple[fast.Publish, bytes, bytes] | None:
        """Add a frame of the content; (publish, properties, body) once it is whole."""
        if self._properties is None:
            self._header(frame)
        elif frame.type != FRAME_BODY:
            raise _unexpected("expected content body, got non content body frame instead")
        else:
            self._body.append(frame.payload)
            self._expected -= len(frame.payload)
            if self._expected < 0:
                raise ConnectionException(
                    ReplyCode.FRAME_ERROR,
                    "content body longer than its header said",
                    fast.BASIC,
                    fast.PUBLISH,
                )
        if self._expected:
            return None
        assert self.publish is not None and self._properties is not None
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        whole = (self.publish, self._properties, body)
        self.reset()
        return whole

    def _header(self, frame: Frame) -> None:
        if frame.type != FRAME_HEADER:
            raise _unexpected("expected content header for class 60, got non content header frame instead")
        try:
            class_id, size, properties = fast.decode_content_header(frame.payload)
        except ValueError as e:
            raise ConnectionException(ReplyCode.FRAME_ERROR, str(e), fast.BASIC, fast.PUBLISH) from None
        if class_id != fast.BASIC:
            raise _unexpected(f"expected content header for class 60, got one for class {class_id} instead")
        if size > MAX_MESSAGE_SIZE:
            raise ChannelException(
                ReplyCode.PRECONDITION_FAILED,
                f"message size {size} is larger than configured max size {MAX_MESSAGE_SIZE}",
                fast.BASIC,
                fast.PUBLISH,
            )
        self._properties, self._expected = properties, size
