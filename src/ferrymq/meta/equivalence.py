"""What RabbitMQ checks when a declaration meets an existing exchange or queue, and its messages for a
mismatch (rabbit_misc:assert_field_equivalence / assert_args_equivalence): pure functions."""

from __future__ import annotations

from typing import Any

from ferrymq.meta.entities import Arguments, Exchange, Queue
from ferrymq.meta.errors import PreconditionFailed, ResourceLocked, resource

EXCHANGE_ARGUMENTS = ("alternate-exchange",)
QUEUE_ARGUMENTS = (
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-single-active-consumer",
    "x-queue-type",
    "x-quorum-initial-group-size",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
    "x-queue-leader-locator",
)
_INT32 = range(-(2**31), 2**31)


def amqp_type(value: Any) -> str:
    """The AMQP field-table type name RabbitMQ reports for a value, as pika would encode it."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if value in _INT32 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "void"
    return "longstr"


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _typed(value: Any) -> tuple[str, Any]:
    """A value with its type class: every integer type matches every other, as in RabbitMQ."""
    kind = amqp_type(value)
    return ("int" if kind in ("signedint", "long") else kind), value


def _mismatch(field: str, what: str, received: str, current: str) -> PreconditionFailed:
    return PreconditionFailed(
        f"inequivalent arg '{field}' for {what}: received {received} but current is {current}"
    )


def _check_field(field: str, what: str, received: Any, current: Any) -> None:
    if received != current:
        raise _mismatch(field, what, f"'{_show(received)}'", f"'{_show(current)}'")


def _check_arguments(keys: tuple[str, ...], what: str, received: Arguments, current: Arguments) -> None:
    for key in keys:
        new, old = received.get(key), current.get(key)
        if new is None and old is None:
            continue
        if new is not None and old is not None:
            if _typed(new) != _typed(old):
                raise _mismatch(key, what, f"'{_show(new)}'", f"'{_show(old)}'")
            continue
        described = [
            "none" if v is None else f"the value '{_show(v)}' of type '{amqp_type(v)}'" for v in (new, old)
        ]
        raise _mismatch(key, what, described[0], described[1])


def check_exchange(declared: Exchange, current: Exchange) -> None:
    """Raise 406 when `declared` is not equivalent to the existing `current`."""
    what = resource("exchange", current.name, current.vhost)
    _check_field("type", what, declared.type, current.type)
    _check_field("durable", what, declared.durable, current.durable)
    _check_field("auto_delete", what, declared.auto_delete, current.auto_delete)
    _check_field("internal", what, declared.internal, current.internal)
    _check_arguments(EXCHANGE_ARGUMENTS, what, declared.arguments, current.arguments)


def check_owner(owner: str | None, current: Queue) -> None:
    """Raise 405 when `owner` may not use the exclusive queue `current` (or asks exclusivity of a
    queue that is not exclusive)."""
    if current.exclusive_owner != owner and (current.exclusive_owner is not None or owner is not None):
        raise ResourceLocked(
            f"cannot obtain exclusive access to locked {resource('queue', current.name, current.vhost)}."
            " It could be originally declared on another connection or the exclusive property value"
            " does not match that of the original declaration."
        )


def check_queue(declared: Queue, current: Queue) -> None:
    """Raise 406 or 405 when `declared` is not equivalent to the existing `current`."""
    what = resource("queue", current.name, current.vhost)
    _check_field("durable", what, declared.durable, current.durable)
    _check_field("auto_delete", what, declared.auto_delete, current.auto_delete)
    check_owner(declared.exclusive_owner, current)
    _check_arguments(QUEUE_ARGUMENTS, what, declared.arguments, current.arguments)
