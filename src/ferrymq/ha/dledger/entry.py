"""DLedger's on-disk entry: a 48-byte header, then the body.

The layout (big-endian), as DLedger's `DLedgerEntry` / `DLedgerEntryCoder` write it::

    magic i32 | size i32 | index i64 | term i64 | pos i64 | channel i32 | chain_crc i32 | body_crc i32
    | body_size i32 | body

`size` counts the whole entry (48 + body). `pos` is the entry's own position in the data files, so
when the body is a CommitLog record its physical offset is `pos + 48` and ConsumeQueue and index
entries point at the body, as in a classic CommitLog. A data file's unused tail starts with a blank:
magic -1 and the remaining size (at least 8 bytes). The index file holds one 32-byte unit per entry
at `index * 32`: magic i32 | pos i64 | size i32 | index i64 | term i64.

DLedger writes 0 in both CRC fields. We fill `body_crc` with the CRC32 of the body and `chain_crc`
with the CRC32 of the body CRC continued from the previous entry's chain CRC, so a reader can check
a body and the order of the entries; files written by DLedger itself are read with `verify=False`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from isal.isal_zlib import crc32

from ferrymq.protocol.errors import ProtocolError

MAGIC_NORMAL = 1
MAGIC_NOOP = 2  # a new leader's first entry (DLedger appends one for linearizable reads)
MAGIC_CONFIG_CHANGE = 3
MAGIC_BLANK = -1
ENTRY_MAGICS = frozenset((MAGIC_NORMAL, MAGIC_NOOP, MAGIC_CONFIG_CHANGE))

HEADER = struct.Struct(">iiqqqiIIi")
BODY_OFFSET = HEADER.size  # 48
POS_OFFSET = 24
MIN_BLANK = 8
INDEX_UNIT = struct.Struct(">iqiqq")  # 32 bytes
MAX_ENTRY_SIZE = 0x7FFFFFFF


class EntryError(ProtocolError):
    """Bytes that are not a well-formed DLedger entry."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry as Raft and the stores see it: its place, its term and opaque bytes."""

    index: int
    term: int
    body: bytes | memoryview
    magic: int = MAGIC_NORMAL


@dataclass(frozen=True, slots=True)
class EntryHeader:
    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int


def body_crc(body: bytes | memoryview) -> int:
    return crc32(body)


def chain_crc(prev_chain_crc: int, crc_of_body: int) -> int:
    """The CRC linking an entry to everything before it."""
    return crc32(crc_of_body.to_bytes(4, "big"), prev_chain_crc)


def encode_run(
    entries: Sequence[Entry], pos: int = 0, prev_chain_crc: int = 0
) -> tuple[list[bytes | memoryview], list[int], int]:
    """Consecutive entries stored from `pos` on: headers interleaved with the bodies (which are not
    copied), each entry's position, and the last chain CRC."""
    parts: list[bytes | memoryview] = []
    positions = []
    chain = prev_chain_crc
    pack = HEADER.pack
    for e in entries:
        if e.magic not in ENTRY_MAGICS:
            raise EntryError(f"unknown entry magic {e.magic}")
        if e.index < 0 or e.term < 0:
            raise EntryError(f"negative index or term ({e.index}, {e.term})")
        crc = crc32(e.body)
        chain = crc32(crc.to_bytes(4, "big"), chain)
        n = len(e.body)
        parts += (pack(e.magic, BODY_OFFSET + n, e.index, e.term, pos, 0, chain, crc, n), e.body)
        positions.append(pos)
        pos += BODY_OFFSET + n
    return parts, positions, chain


def decode_run(
    buf: bytes | memoryview, offset: int = 0, count: int = -1, *, verify: bool = True
) -> tuple[list[Entry], int]:
    """`count` entries from `offset` (-1: up to the end of `buf`) with bodies as views of `buf`,
    and the offset after them; each header is checked as `decode_header` does."""
    view = memoryview(buf)
    end = len(view)
    unpack = HEADER.unpack_from
    out: list[Entry] = []
    while (len(out) < count) if count >= 0 else (offset < end):
        if end - offset < BODY_OFFSET:
            raise EntryError(f"truncated entry header at {offset}: {end - offset} of 48 bytes")
        magic, size, index, term, pos, _, _, crc, body_size = unpack(view, offset)
        _check(offset, magic, size, index, term, pos, body_size)
        if offset + size > end:
            raise EntryError(f"truncated entry at {offset}: {end - offset} of {size} bytes")
        body = view[offset + BODY_OFFSET : offset + size]
        if verify and crc32(body) != crc:
            raise EntryError(f"entry {index} at {offset}: body CRC mismatch")
        out.append(Entry(index, term, body, magic))
        offset += size
    return out, offset


def encode_header(
    index: int,
    term: int,
    pos: int,
    body: bytes | memoryview,
    *,
    magic: int = MAGIC_NORMAL,
    channel: int = 0,
    prev_chain_crc: int = 0,
) -> bytes:
    """The 48 bytes that go before `body`, with both CRCs computed."""
    if magic not in ENTRY_MAGICS:
        raise EntryError(f"unknown entry magic {magic}")
    if len(body) > MAX_ENTRY_SIZE - BODY_OFFSET:
        raise EntryError(f"body of {len(body)} bytes does not fit an entry")
    if index < 0 or term < 0 or pos < 0:
        raise EntryError(f"negative index, term or pos ({index}, {term}, {pos})")
    crc = body_crc(body)
    size = BODY_OFFSET + len(body)
    return HEADER.pack(magic, size, index, term, pos, channel, chain_crc(prev_chain_crc, crc), crc, len(body))


def encode(index: int, term: int, pos: int, body: bytes | memoryview, **kw: int) -> bytes:
    return encode_header(index, term, pos, body, **kw) + body


def encode_blank(size: int) -> bytes:
    """The filler for a data file's last `size` bytes: blank magic and the size, then zeros."""
    if size < MIN_BLANK:
        raise EntryError(f"a blank needs {MIN_BLANK} bytes, not {size}")
    return struct.pack(">ii", MAGIC_BLANK, size) + bytes(size - MIN_BLANK)


def is_blank(buf: bytes | memoryview, offset: int = 0) -> bool:
    return len(buf) - offset >= 4 and struct.unpack_from(">i", buf, offset)[0] == MAGIC_BLANK


def decode_header(buf: bytes | memoryview, offset: int = 0) -> EntryHeader:
    """The header at `offset`, checked for a known magic and consistent sizes."""
    if offset < 0 or len(buf) - offset < BODY_OFFSET:
        raise EntryError(f"truncated entry header at {offset}: {max(0, len(buf) - offset)} of 48 bytes")
    h = EntryHeader(*HEADER.unpack_from(buf, offset))
    _check(offset, h.magic, h.size, h.index, h.term, h.pos, h.body_size)
    return h


def _check(offset: int, magic: int, size: int, index: int, term: int, pos: int, body_size: int) -> None:
    if magic not in ENTRY_MAGICS:
        raise EntryError(f"bad entry magic {magic} at {offset}")
    if size < BODY_OFFSET or body_size != size - BODY_OFFSET:
        raise EntryError(f"entry at {offset}: size {size} does not match body size {body_size} + 48")
    if index < 0 or term < 0 or pos < 0:
        raise EntryError(f"entry at {offset}: negative index, term or pos ({index}, {term}, {pos})")


def decode(
    buf: bytes | memoryview, offset: int = 0, *, verify: bool = True
) -> tuple[EntryHeader, memoryview]:
    """The header and a view of the body (no copy); with `verify`, the body CRC must match."""
    h = decode_header(buf, offset)
    end = offset + h.size
    if end > len(buf):
        raise EntryError(f"truncated entry at {offset}: {len(buf) - offset} of {h.size} bytes")
    body = memoryview(buf)[offset + BODY_OFFSET : end]
    if verify and body_crc(body) != h.body_crc:
        raise EntryError(f"entry {h.index} at {offset}: body CRC mismatch")
    return h, body


def set_pos(buf: bytearray | memoryview, offset: int, pos: int) -> None:
    """Rewrite an encoded entry's position, as a leader or follower does when it places the entry."""
    struct.pack_into(">q", buf, offset + POS_OFFSET, pos)


def encode_index(h: EntryHeader) -> bytes:
    return INDEX_UNIT.pack(h.magic, h.pos, h.size, h.index, h.term)


def decode_index(buf: bytes | memoryview, offset: int = 0) -> tuple[int, int, int, int, int]:
    """(magic, pos, size, index, term) of the index unit at `offset`."""
    if offset < 0 or len(buf) - offset < INDEX_UNIT.size:
        raise EntryError(f"truncated index unit at {offset}")
    unit: tuple[int, int, int, int, int] = INDEX_UNIT.unpack_from(buf, offset)
    return unit
