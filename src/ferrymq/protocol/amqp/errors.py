"""RabbitMQ's reply codes and the two kinds of protocol error: one closes a channel, the other the
whole connection. Every failure the protocol layer detects is one of these."""

from __future__ import annotations

import enum


class ReplyCode(enum.IntEnum):
    """Reply codes of connection.close and channel.close; the name is the text's prefix."""

    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541


class AMQPError(Exception):
    """A protocol error with its reply code, the reason (RabbitMQ puts the code's name before it) and
    the method that caused it (class id, method id; 0, 0 when none)."""

    def __init__(self, code: ReplyCode, reason: str = "", class_id: int = 0, method_id: int = 0) -> None:
        self.code = code
        self.reason = reason
        self.class_id = class_id
        self.method_id = method_id
        super().__init__(self.reply_text)

    @property
    def reply_text(self) -> str:
        """The text RabbitMQ sends: "NOT_FOUND - no queue 'q' in vhost '/'" (at most 255 bytes)."""
        text = f"{self.code.name} - {self.reason}" if self.reason else self.code.name
        return text.encode()[:255].decode(errors="ignore")


class ConnectionException(AMQPError):
    """An error that closes the whole connection (a "hard error")."""


class ChannelException(AMQPError):
    """An error that closes only the channel it happened on (a "soft error")."""


class FramingError(ConnectionException):
    """The byte stream itself is broken (bad frame end, size or type): no later frame can be found in
    it, so the connection ends right after its connection.close, without waiting for close-ok."""
