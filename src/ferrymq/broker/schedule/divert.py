"""Where a message with DELAY or a delivery-time property is stored until due (RocketMQ's
HookUtils.handleScheduleMessage): the rules, as a pure function of its properties."""

from __future__ import annotations

from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.properties import Prop, decode_properties, encode_properties
from ferrymq.protocol.sys_flag import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_TYPE_MASK
from ferrymq.protocol.topic_names import SCHEDULE_TOPIC

TIMER_TOPIC = "rmq_sys_wheel_timer"  # every delivery-time message, queue 0
TIMER_OUT_MS = "TIMER_OUT_MS"  # the delivery time the broker settled on (rounded to its precision)
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
_TIMER_PROPS = (Prop.TIMER_DELIVER_MS, Prop.TIMER_DELAY_SEC, Prop.TIMER_DELAY_MS)


class ScheduleError(ValueError):
    """A delivery time or delay level the broker refuses (answered as MESSAGE_ILLEGAL)."""


def may_divert(props: bytes) -> bool:
    """Whether `divert` could hold a message back: the common case (no) decided without parsing."""
    return b"DELAY\x01" in props or b"TIMER_" in props


def divert(
    props: bytes,
    topic: str,
    queue_id: int,
    sys_flag: int,
    now_ms: int,
    max_level: int,
    max_delay_sec: int,
    precision_ms: int,
) -> tuple[str, int, bytes] | None:
    """(system topic, queue id, new properties) for a message to hold back, or None to store it as is.

    DELAY = level > 0 wins over delivery-time properties (which are then dropped); a level above
    the highest is clamped to it. TIMER_DELAY_SEC / TIMER_DELAY_MS count from now, TIMER_DELIVER_MS
    is absolute; a time already past is delivered at once; one further than `max_delay_sec` raises
    ScheduleError. Half and rolled-back transaction messages are left alone (their commit is diverted).
    """
    if not may_divert(props):
        return None
    tran = sys_flag & TRANSACTION_TYPE_MASK
    if tran != TRANSACTION_NOT_TYPE and tran != TRANSACTION_COMMIT_TYPE:
        return None
    try:
        values = decode_properties(props)
    except MessageDecodeError as e:
        raise ScheduleError(str(e)) from None
    level = _integer(values, Prop.DELAY)
    if level > 0:
        for key in _TIMER_PROPS:
            values.pop(key, None)
        level = min(level, max_level)
        values[Prop.DELAY] = str(level)
        return SCHEDULE_TOPIC, level - 1, _with_destination(values, topic, queue_id)
    if topic == TIMER_TOPIC or TIMER_OUT_MS in values:  # already converted once: never twice
        return None
    if Prop.TIMER_DELAY_SEC in values:
        deliver_ms = now_ms + _integer(values, Prop.TIMER_DELAY_SEC) * 1000
    elif Prop.TIMER_DELAY_MS in values:
        deliver_ms = now_ms + _integer(values, Prop.TIMER_DELAY_MS)
    elif Prop.TIMER_DELIVER_MS in values:
        deliver_ms = _integer(values, Prop.TIMER_DELIVER_MS)
    else:
        return None
    if deliver_ms <= now_ms:
        return None
    if deliver_ms - now_ms > max_delay_sec * 1000:
        raise ScheduleError(
            f"delivery time {deliver_ms} is {(deliver_ms - now_ms) / 1000:.0f} s away, more than "
            f"timer_max_delay_sec ({max_delay_sec} s)"
        )
    # RocketMQ's rounding: down to the precision, and a time exactly on a step one step earlier; the
    # slot is then delivered one step after TIMER_OUT_MS, so never before the time asked for.
    deliver_ms = (
        deliver_ms - precision_ms
        if deliver_ms % precision_ms == 0
        else deliver_ms // precision_ms * precision_ms
    )
    values[TIMER_OUT_MS] = str(deliver_ms)
    return TIMER_TOPIC, 0, _with_destination(values, topic, queue_id)


def _integer(values: dict[str, str], key: str) -> int:
    raw = values.get(key)
    if raw is None or raw == "":
        return 0
    try:
        return int(raw)
    except ValueError:
        raise ScheduleError(f"property {key} must be a whole number, not {raw!r}") from None


def _with_destination(values: dict[str, str], topic: str, queue_id: int) -> bytes:
    values[Prop.REAL_TOPIC] = topic
    values[Prop.REAL_QID] = str(queue_id)
    return encode_properties(values).encode()
