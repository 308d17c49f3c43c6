"""Trace messages (bodies of RMQ_SYS_TRACE_TOPIC) decoded into one flat row per trace record.

RocketMQ clients write Pub records when a send finishes, SubBefore/SubAfter around each delivery to
a listener, and EndTransaction at a transaction's end; one trace message carries several. The
decoder is ferrymq.protocol.trace's; a body it cannot read becomes one "Invalid" row, counted in
the report rather than failing the job.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ferrymq.protocol.trace import (
    EndTransactionRecord,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceDecodeError,
    decode_records,
    pub_for,
)

DDL = (
    "type string, timestamp timestamp, group string, topic string, msg_id string, keys string, tags string, "
    "request_id string, retry_times int, cost_time_ms bigint, success boolean, store_host string, "
    "body_length int, transaction_state string"
)


def _rows(r) -> list[tuple]:
    """A record's rows: one, or for a batch's Pub record one per message (its ids joined by commas)."""
    if isinstance(r, PubRecord) and "," in r.msg_id:
        return [_row(pub_for(r, msg_id)) for msg_id in r.msg_id.split(",")]
    return [_row(r)]


def _row(r) -> tuple:
    """A record as a row in DDL's column order."""
    if isinstance(r, PubRecord):
        return ("Pub", _time(r.timestamp), r.group, r.topic, r.msg_id, r.keys, r.tags, None, None,
                r.cost_time, r.success, r.store_host, r.body_length, None)  # fmt: skip
    if isinstance(r, SubBeforeRecord):
        return ("SubBefore", _time(r.timestamp), r.group, None, r.msg_id, r.keys, None, r.request_id,
                r.retry_times, None, None, None, None, None)  # fmt: skip
    if isinstance(r, SubAfterRecord):
        return ("SubAfter", _time(r.timestamp), r.group or None, None, r.msg_id, r.keys, None, r.request_id,
                None, r.cost_time, r.success, None, None, None)  # fmt: skip
    assert isinstance(r, EndTransactionRecord)
    return ("EndTransaction", _time(r.timestamp), r.group, r.topic, r.msg_id, r.keys, r.tags, None, None,
            None, None, r.store_host, None, r.transaction_state.value)  # fmt: skip


_INVALID = ("Invalid", *([None] * DDL.count(",")))


def decode_body(body: bytes) -> list[tuple]:
    """The rows of one trace message (see DDL); one Invalid row if it cannot be decoded."""
    try:
        return [row for record in decode_records(body) for row in _rows(record)]
    except TraceDecodeError:
        return [_INVALID]


def _time(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, UTC) if ms else None
