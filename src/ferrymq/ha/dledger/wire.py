"""Raft messages as bytes, for whatever transport carries them between brokers.

One self-describing frame per message: kind u8 | term i64 | src and dst (u8 length + UTF-8) | the
kind's fields, big-endian. An Append's entries travel in DLedger's entry layout (`entry.py`), so a
follower receives the very bytes it will store; decoding checks each body's CRC and hands bodies
out as views of the frame, without copying. `REQUEST_CODES` gives each message the remoting request
code DLedger uses for it, so the messages can ride on RocketMQ remoting frames.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from ferrymq.ha.dledger import entry as codec
from ferrymq.ha.dledger.log import Entry
from ferrymq.ha.dledger.messages import Append, AppendResponse, Message, TimeoutNow, VoteRequest, VoteResponse
from ferrymq.protocol.errors import ProtocolError

VOTE, HEART_BEAT, PUSH, LEADERSHIP_TRANSFER = 51001, 51002, 51004, 51005  # DLedger's request codes
REQUEST_CODES: dict[type, int] = {
    VoteRequest: VOTE,
    VoteResponse: VOTE,
    Append: PUSH,
    AppendResponse: PUSH,
    TimeoutNow: LEADERSHIP_TRANSFER,
}

KINDS: tuple[type, ...] = (VoteRequest, VoteResponse, Append, AppendResponse, TimeoutNow)
TERM = struct.Struct(">Bq")
VOTE_REQUEST = struct.Struct(">qqB")
VOTE_RESPONSE = struct.Struct(">B")
APPEND = struct.Struct(">qqqi")
APPEND_RESPONSE = struct.Struct(">Bqqqq")
MAX_ID = 255
PRE, TRANSFER, GRANTED, SUCCESS, REFUSED = 1, 2, 4, 1, 2


class WireError(ProtocolError):
    """Bytes that are not a Raft message frame."""


def _name(s: str) -> bytes:
    raw = s.encode()
    if len(raw) > MAX_ID:
        raise WireError(f"node id {s[:20]!r}... longer than {MAX_ID} bytes")
    return bytes((len(raw),)) + raw


class RunCache:
    """The last run of entries encoded for an append: a leader sends the same entries to each
    follower, so their headers and CRCs are computed once. A run is reused only for the very same
    Entry objects in the same order (immutable, so the same bytes)."""

    def __init__(self) -> None:
        self._entries: Sequence[Entry] = ()
        self._parts: list[bytes | memoryview] = []

    def parts(self, entries: Sequence[Entry]) -> list[bytes | memoryview]:
        cached = self._entries
        if len(cached) != len(entries) or any(a is not b for a, b in zip(cached, entries, strict=True)):
            self._parts = codec.encode_run(entries)[0]
            self._entries = entries
        return self._parts


def encode(m: Message, runs: RunCache | None = None) -> list[bytes | memoryview]:
    """The frame as parts (entry bodies are not copied); b"".join them or write them in order.
    `runs`: encode an append's entries through it (see RunCache)."""
    head = TERM.pack(KINDS.index(type(m)), m.term) + _name(m.src) + _name(m.dst)
    if isinstance(m, VoteRequest):
        return [head + VOTE_REQUEST.pack(m.last_index, m.last_term, PRE * m.pre | TRANSFER * m.transfer)]
    if isinstance(m, VoteResponse):
        return [head + VOTE_RESPONSE.pack(GRANTED * m.granted | PRE * m.pre)]
    if isinstance(m, AppendResponse):
        flags = SUCCESS * m.success | REFUSED * m.refused
        fields = (flags, m.match_index, m.reject_index, m.conflict_index, m.conflict_term)
        return [head + APPEND_RESPONSE.pack(*fields)]
    if isinstance(m, TimeoutNow):
        return [head]
    entries = runs.parts(m.entries) if runs is not None else codec.encode_run(m.entries)[0]
    return [head + APPEND.pack(m.prev_index, m.prev_term, m.commit, len(m.entries)), *entries]


def decode(frame: bytes | memoryview) -> Message:
    """The message in `frame`; WireError names what is wrong with a bad one."""
    buf = memoryview(frame)
    try:
        m = _decode(buf)
    except codec.EntryError as e:
        raise WireError(f"bad entry in an append: {e}") from None
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise WireError(f"truncated or malformed Raft frame: {e}") from None
    low = [(k, v) for k, v in _indexes(m) if v < -1]
    if low:
        raise WireError(f"{type(m).__name__} with {low[0][0]} {low[0][1]} (lowest is -1)")
    return m


def _indexes(m: Message) -> list[tuple[str, int]]:
    if isinstance(m, VoteRequest):
        return [("last_index", m.last_index), ("last_term", m.last_term)]
    if isinstance(m, Append):
        return [("prev_index", m.prev_index), ("prev_term", m.prev_term), ("commit", m.commit)]
    if isinstance(m, AppendResponse):
        return [("match_index", m.match_index), ("reject_index", m.reject_index)]
    return []


def _decode(buf: memoryview) -> Message:
    kind, term = TERM.unpack_from(buf)
    if kind >= len(KINDS):
        raise WireError(f"unknown Raft message kind {kind}")
    if term < 0:
        raise WireError(f"negative term {term}")
    offset = TERM.size
    src, offset = _read_name(buf, offset)
    dst, offset = _read_name(buf, offset)
    cls = KINDS[kind]
    rest = len(buf) - offset
    if cls is TimeoutNow:
        _expect(rest, 0, cls)
        return TimeoutNow(src, dst, term)
    if cls is VoteRequest:
        _expect(rest, VOTE_REQUEST.size, cls)
        last_index, last_term, flags = VOTE_REQUEST.unpack_from(buf, offset)
        return VoteRequest(src, dst, term, last_index, last_term, bool(flags & PRE), bool(flags & TRANSFER))
    if cls is VoteResponse:
        _expect(rest, VOTE_RESPONSE.size, cls)
        (flags,) = VOTE_RESPONSE.unpack_from(buf, offset)
        return VoteResponse(src, dst, term, bool(flags & GRANTED), bool(flags & PRE))
    if cls is AppendResponse:
        _expect(rest, APPEND_RESPONSE.size, cls)
        flags, match, reject, conflict_index, conflict_term = APPEND_RESPONSE.unpack_from(buf, offset)
        return AppendResponse(
            src, dst, term, bool(flags & SUCCESS), match, reject, conflict_index, conflict_term,
            bool(flags & REFUSED),
        )  # fmt: skip
    prev_index, prev_term, commit, count = APPEND.unpack_from(buf, offset)
    offset += APPEND.size
    if count < 0 or count > (len(buf) - offset) // codec.BODY_OFFSET:
        raise WireError(f"append claims {count} entries in {len(buf) - offset} bytes")
    entries, offset = codec.decode_run(buf, offset, count)
    _expect(len(buf) - offset, 0, cls)
    return Append(src, dst, term, prev_index, prev_term, entries, commit)


def _read_name(buf: memoryview, offset: int) -> tuple[str, int]:
    n = buf[offset]
    end = offset + 1 + n
    if end > len(buf):
        raise WireError("node id runs past the frame")
    return bytes(buf[offset + 1 : end]).decode(), end


def _expect(rest: int, size: int, cls: Callable) -> None:
    if rest != size:
        raise WireError(f"{cls.__name__} frame has {rest} bytes of fields, expected {size}")
