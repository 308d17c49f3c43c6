"""RocketMQ's message-trace records (the client trace module's wire format), as typed structs.

A trace message in `RMQ_SYS_TRACE_TOPIC` carries one or more records. Each record is its fields joined
by CONTENT_SEP (char 1) and terminated by FIELD_SEP (char 2), in the exact order RocketMQ's
`TraceDataEncoder` writes them; booleans are Java's `true`/`false`. The decoder also reads the older
shorter forms RocketMQ's own decoder accepts (Pub without offsetMsgId, SubAfter without contextCode or
timestamp/group) and skips record types it does not know (as RocketMQ does), so new writers do not
break old readers. It raises only `TraceDecodeError` (a `ProtocolError`).

This module is self-contained (it imports only msgspec and the error base) so that the trace-report
job can ship it to Spark executors as one file.
"""

import re
from collections.abc import Callable
from enum import IntEnum, StrEnum
from operator import itemgetter
from typing import Any

import msgspec

from ferrymq.protocol.errors import ProtocolError

CONTENT_SEP = "\x01"
FIELD_SEP = "\x02"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRACE_PRODUCER_GROUP_PREFIX = "_INNER_TRACE_PRODUCER"
MAX_TRACE_BODY = 128_000
"""RocketMQ's limit for the body of one trace message (`maxMsgSize` of the trace dispatcher)."""
KEY_SEPARATOR = " "


class TraceDecodeError(ProtocolError):
    """Bytes that are not RocketMQ trace records."""


class MessageType(IntEnum):
    """RocketMQ's `MessageType`; trace records carry its ordinal."""

    NORMAL = 0
    TRANS_HALF = 1
    TRANS_COMMIT = 2
    DELAY = 3
    ORDER = 4


class TransactionState(StrEnum):
    """RocketMQ's `LocalTransactionState`; trace records carry its name (UNKNOW is RocketMQ's spelling)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


class _ProducerSide(msgspec.Struct, frozen=True, kw_only=True):
    """The fields Pub and EndTransaction records share: who sent what, where."""

    timestamp: int
    region_id: str
    group: str
    topic: str
    msg_id: str
    tags: str
    keys: str
    store_host: str


class PubRecord(_ProducerSide, frozen=True, kw_only=True):
    """A send: written by the producer after the broker answered (or the send failed)."""

    body_length: int
    cost_time: int
    msg_type: MessageType
    offset_msg_id: str
    success: bool


class SubBeforeRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A delivery to a consumer's listener, written just before the listener runs."""

    timestamp: int
    region_id: str
    group: str
    request_id: str
    msg_id: str
    retry_times: int
    keys: str


class SubAfterRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The listener's outcome for one message; `request_id` pairs it with its SubBefore."""

    request_id: str
    msg_id: str
    cost_time: int
    success: bool
    keys: str
    context_code: int = 0
    timestamp: int = 0
    group: str = ""


class EndTransactionRecord(_ProducerSide, frozen=True, kw_only=True):
    """A transaction's end (commit, rollback or unknown), from the local callback or a check-back."""

    msg_type: MessageType
    transaction_id: str
    transaction_state: TransactionState
    from_transaction_check: bool


TraceRecord = PubRecord | SubBeforeRecord | SubAfterRecord | EndTransactionRecord

# --- encoding -----------------------------------------------------------------------------------


_BOOL = {True: "true", False: "false"}
_ORDINALS = {t: str(t.value) for t in MessageType}


def _pub_text(r: PubRecord) -> str:
    return (
        f"Pub\x01{r.timestamp}\x01{r.region_id}\x01{r.group}\x01{r.topic}\x01{r.msg_id}\x01{r.tags}\x01{r.keys}"
        f"\x01{r.store_host}\x01{r.body_length}\x01{r.cost_time}\x01{_ORDINALS[r.msg_type]}\x01{r.offset_msg_id}"
        f"\x01{_BOOL[r.success]}\x02"
    )


def _sub_before_text(r: SubBeforeRecord) -> str:
    return (
        f"SubBefore\x01{r.timestamp}\x01{r.region_id}\x01{r.group}\x01{r.request_id}\x01{r.msg_id}"
        f"\x01{r.retry_times}\x01{r.keys}\x02"
    )


def _sub_after_text(r: SubAfterRecord) -> str:
    return (
        f"SubAfter\x01{r.request_id}\x01{r.msg_id}\x01{r.cost_time}\x01{_BOOL[r.success]}\x01{r.keys}"
        f"\x01{r.context_code}\x01{r.timestamp}\x01{r.group}\x02"
    )


def _end_transaction_text(r: EndTransactionRecord) -> str:
    return (
        f"EndTransaction\x01{r.timestamp}\x01{r.region_id}\x01{r.group}\x01{r.topic}\x01{r.msg_id}\x01{r.tags}"
        f"\x01{r.keys}\x01{r.store_host}\x01{r.msg_type:d}\x01{r.transaction_id}"
        f"\x01{r.transaction_state.value}\x01{_BOOL[r.from_transaction_check]}\x02"
    )


# record type -> (its writer, how many separators a well-formed record has)
_WRITERS: dict[type, tuple[Callable[[Any], str], int]] = {
    PubRecord: (_pub_text, 14),
    SubBeforeRecord: (_sub_before_text, 8),
    SubAfterRecord: (_sub_after_text, 9),
    EndTransactionRecord: (_end_transaction_text, 13),
}


def encode_record(record: TraceRecord) -> str:
    """One record in RocketMQ's layout, terminator included.

    Raises ValueError when a text field contains a separator character: such a record could not be
    read back by anyone, so it is refused rather than written corrupt.
    """
    writer = _WRITERS.get(type(record))
    if writer is None:
        raise TypeError(f"not a trace record: {record!r}")
    write, fields = writer
    text = write(record)
    if text.count(CONTENT_SEP) != fields - 1 or text.count(FIELD_SEP) != 1:
        raise ValueError("trace record fields must not contain the characters \\x01 or \\x02")
    return text


def encode_records(records: list[TraceRecord]) -> bytes:
    """The body of one trace message: the records concatenated, UTF-8."""
    return "".join(map(encode_record, records)).encode()


_BATCH_KEY_PREFIX = "BATCH#"
_RUN = itemgetter(slice(None, -2))  # an id but its last two hex digits


def batch_keys(msg_ids: list[str]) -> list[str]:
    """The index keys of a batch's Pub record: one per run of ids that differ only in their last two
    hex digits (a producer's unique ids count up, so a batch takes a key or two, not one per message).
    `message_trace` looks a message up under its id and under `batch_keys([its id])`."""
    return [_BATCH_KEY_PREFIX + run for run in dict.fromkeys(map(_RUN, msg_ids))]


def pub_for(record: PubRecord, msg_id: str) -> PubRecord | None:
    """`record` as the Pub record of message `msg_id` alone, or None if it is not about that message.

    RocketMQ's clients write one Pub record per send: for a batch its msgId and offsetMsgId are the
    messages' ids joined by commas (and its body length the batch's); this picks out one message.
    """
    if record.msg_id == msg_id:
        return record
    ids = record.msg_id.split(",")
    if msg_id not in ids:
        return None
    offset_ids = record.offset_msg_id.split(",")
    i = ids.index(msg_id)
    return msgspec.structs.replace(
        record, msg_id=msg_id, offset_msg_id=offset_ids[i] if i < len(offset_ids) else ""
    )


def record_keys(record: TraceRecord) -> list[str]:
    """The index keys RocketMQ gives a record's trace message: its msgId, then its business keys."""
    keys = [record.msg_id]
    if record.keys:
        keys.extend(k for k in record.keys.split(KEY_SEPARATOR) if k)
    return keys


# --- decoding -----------------------------------------------------------------------------------

_INT = re.compile(r"[+-]?[0-9]{1,19}", re.ASCII)


def _int(text: str, what: str) -> int:
    if _INT.fullmatch(text) is None:
        raise TraceDecodeError(f"trace field {what} is not an integer: {text[:40]!r}")
    return int(text)


def _bool(text: str) -> bool:
    return text.lower() == "true"  # Java's Boolean.parseBoolean: anything else is false


def _msg_type(text: str) -> MessageType:
    ordinal = _int(text, "msgType")
    try:
        return MessageType(ordinal)
    except ValueError:
        raise TraceDecodeError(f"unknown trace msgType ordinal {ordinal}") from None


def _pub(f: list[str]) -> PubRecord:
    offset_msg_id, success = (f[12], f[13]) if len(f) >= 14 else ("", f[12])
    return PubRecord(
        timestamp=_int(f[1], "timestamp"), region_id=f[2], group=f[3], topic=f[4], msg_id=f[5], tags=f[6],
        keys=f[7], store_host=f[8], body_length=_int(f[9], "bodyLength"), cost_time=_int(f[10], "costTime"),
        msg_type=_msg_type(f[11]), offset_msg_id=offset_msg_id, success=_bool(success),
    )  # fmt: skip


def _sub_before(f: list[str]) -> SubBeforeRecord:
    return SubBeforeRecord(
        timestamp=_int(f[1], "timestamp"), region_id=f[2], group=f[3], request_id=f[4], msg_id=f[5],
        retry_times=_int(f[6], "retryTimes"), keys=f[7],
    )  # fmt: skip


def _sub_after(f: list[str]) -> SubAfterRecord:
    return SubAfterRecord(
        request_id=f[1], msg_id=f[2], cost_time=_int(f[3], "costTime"), success=_bool(f[4]), keys=f[5],
        context_code=_int(f[6], "contextCode") if len(f) >= 7 else 0,
        timestamp=_int(f[7], "timestamp") if len(f) >= 8 else 0,
        group=f[8] if len(f) >= 9 else "",
    )  # fmt: skip


def _end_transaction(f: list[str]) -> EndTransactionRecord:
    try:
        state = TransactionState(f[11])
    except ValueError:
        raise TraceDecodeError(f"unknown transaction state {f[11][:40]!r}") from None
    return EndTransactionRecord(
        timestamp=_int(f[1], "timestamp"), region_id=f[2], group=f[3], topic=f[4], msg_id=f[5], tags=f[6],
        keys=f[7], store_host=f[8], msg_type=_msg_type(f[9]), transaction_id=f[10], transaction_state=state,
        from_transaction_check=_bool(f[12]),
    )  # fmt: skip


# type name -> (fewest fields RocketMQ's decoder accepts, parser)
_PARSERS: dict[str, tuple[int, Callable[[list[str]], TraceRecord]]] = {
    "Pub": (13, _pub),
    "SubBefore": (8, _sub_before),
    "SubAfter": (6, _sub_after),
    "EndTransaction": (13, _end_transaction),
}


def decode_records(data: bytes | bytearray | memoryview | str) -> list[TraceRecord]:
    """Every known record in a trace message body; unknown record types are skipped."""
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode()
        except UnicodeDecodeError as exc:
            raise TraceDecodeError(f"trace body is not UTF-8: {exc}") from None
    records = []
    for piece in text.split(FIELD_SEP):
        if not piece:
            continue
        fields = piece.split(CONTENT_SEP)
        parser = _PARSERS.get(fields[0])
        if parser is None:
            continue
        least, parse = parser
        if len(fields) < least:
            raise TraceDecodeError(f"{fields[0]} trace record has {len(fields)} fields, needs {least}")
        records.append(parse(fields))
    return records
