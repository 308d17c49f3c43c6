"""The errors a declaration can meet, with the reply codes and texts RabbitMQ answers for the same
case, so that a gateway passes them to AMQP clients unchanged."""

from __future__ import annotations

from typing import ClassVar

REPLY_NAMES = {
    403: "ACCESS_REFUSED",
    404: "NOT_FOUND",
    405: "RESOURCE_LOCKED",
    406: "PRECONDITION_FAILED",
    503: "COMMAND_INVALID",
}


class MetaError(Exception):
    """A refused metadata operation: an AMQP reply code and RabbitMQ's text for it."""

    code: ClassVar[int] = 0

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    @property
    def reply_text(self) -> str:
        """The reply text of channel.close / connection.close, e.g. "NOT_FOUND - no queue 'q' ..."."""
        return f"{REPLY_NAMES[self.code]} - {self.text}"

    def __str__(self) -> str:
        return self.reply_text

    @staticmethod
    def of(code: int, text: str) -> MetaError:
        """The error class for `code` (used where an error crosses HTTP)."""
        return _BY_CODE.get(code, PreconditionFailed)(text)


class AccessRefused(MetaError):
    code = 403


class NotFound(MetaError):
    code = 404


class ResourceLocked(MetaError):
    code = 405


class PreconditionFailed(MetaError):
    code = 406


class CommandInvalid(MetaError):
    """A connection-level error in RabbitMQ (e.g. an unknown exchange type)."""

    code = 503


_BY_CODE: dict[int, type[MetaError]] = {
    cls.code: cls for cls in (AccessRefused, NotFound, ResourceLocked, PreconditionFailed, CommandInvalid)
}


def resource(kind: str, name: str, vhost: str) -> str:
    """RabbitMQ's way to name a resource in a message: "queue 'q' in vhost '/'"."""
    return f"{kind} '{name}' in vhost '{vhost}'"


def not_found(kind: str, name: str, vhost: str | None = None) -> NotFound:
    """404 for a missing resource; vhosts and users are named without a vhost."""
    return NotFound(f"no {kind} '{name}'" if vhost is None else f"no {resource(kind, name, vhost)}")
