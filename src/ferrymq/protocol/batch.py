"""SEND_BATCH_MESSAGE bodies, and writing a checked batch straight into CommitLog records.

A batch entry is TOTALSIZE, MAGICCODE(0), BODYCRC(0), FLAG, BODYLEN + body, PROPLEN + properties.
Each codec has a C version (ferrymq/_native/batch.c) used when it is built; the py_ functions stay
the references.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from isal.isal_zlib import crc32

from ferrymq._native import load
from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.hashes import tag_hash
from ferrymq.protocol.properties import find_property
from ferrymq.protocol.record import CQ_ENTRY, FIXED, MAGIC_V1, MAGIC_V2, MAX_TOPIC_V1_SIZE

_SHORT = struct.Struct(">h")
_BATCH_HEAD = struct.Struct(">iiiii")  # TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLEN
BATCH_OVERHEAD = _BATCH_HEAD.size + 2


def py_encode_batch(entries: list[tuple[bytes, bytes, int]]) -> bytes:
    """Encode (body, encoded properties, flag) triples as a SEND_BATCH_MESSAGE body (the reference for
    the C version that `encode_batch` is when it is built)."""
    parts: list[bytes] = []
    for body, props, flag in entries:
        size = BATCH_OVERHEAD + len(body) + len(props)
        parts += (_BATCH_HEAD.pack(size, 0, 0, flag, len(body)), body, _SHORT.pack(len(props)), props)
    return b"".join(parts)


def py_scan_batch(data: bytes | memoryview) -> tuple[int, int, int]:
    """Validate a whole batch body; return (message count, largest body, largest properties).

    Runs for every SEND_BATCH_MESSAGE, so the checks are inline rather than a call per entry. The
    reference for the C version (ferrymq/_native/batch.c) that `scan_batch` is when it is built.
    """
    view = memoryview(data)
    unpack_head, unpack_short, head_size = _BATCH_HEAD.unpack_from, _SHORT.unpack_from, _BATCH_HEAD.size
    pos, end = 0, len(view)
    count = largest_body = largest_props = 0
    while pos < end:
        if end - pos < BATCH_OVERHEAD:
            raise MessageDecodeError(f"truncated batch entry at {pos}")
        size, _magic, _crc, _flag, body_len = unpack_head(view, pos)
        props_len_pos = pos + head_size + body_len
        if body_len < 0 or size < BATCH_OVERHEAD or pos + size > end or props_len_pos + 2 > pos + size:
            raise MessageDecodeError(f"batch entry at {pos} has inconsistent lengths")
        props_len = unpack_short(view, props_len_pos)[0]
        if props_len < 0 or props_len_pos + 2 + props_len != pos + size:
            raise MessageDecodeError(f"batch entry at {pos} has inconsistent properties length")
        count += 1
        if body_len > largest_body:
            largest_body = body_len
        if props_len > largest_props:
            largest_props = props_len
        pos += size
    return count, largest_body, largest_props


def iter_batch(data: bytes | memoryview) -> Iterator[tuple[int, memoryview, bytes]]:
    """Split a batch body into (flag, body, properties) per message; MessageDecodeError if malformed."""
    scan_batch(data)
    view = memoryview(data)
    pos, end = 0, len(view)
    while pos < end:
        size, _, _, flag, body_len = _BATCH_HEAD.unpack_from(view, pos)
        body_end = pos + _BATCH_HEAD.size + body_len
        yield flag, view[pos + _BATCH_HEAD.size : body_end], bytes(view[body_end + 2 : pos + size])
        pos += size


def batch_records_size(
    batch_size: int, count: int, topic_block: bytes, born_host: bytes, store_host: bytes
) -> int:
    """The CommitLog bytes a validated batch becomes: each entry gains the record fields and topic."""
    head = FIXED[len(born_host) + 2 * len(store_host)].size
    return batch_size + count * (head + len(topic_block) - _BATCH_HEAD.size)


def py_write_batch_records(
    buf,
    pos: int,
    batch: bytes | memoryview,
    count: int,
    topic_block: bytes,
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
) -> bytearray:
    """Write the `count` entries of a batch body (checked by scan_batch) as records.

    Returns their ConsumeQueue entries (CQ_ENTRY each: CommitLog offset, size, tag hash), built
    here while every field is at hand so the dispatcher need not parse the records back.
    Body and properties are copied straight from the request into `buf`: no per-message objects.
    The reference for the C version that `write_batch_records` is when it is built.
    """
    view = memoryview(batch)
    raw = batch if type(batch) is bytes else bytes(view)  # for bytes.find, which a view lacks
    find = raw.find
    fixed = FIXED[len(born_host) + 2 * len(store_host)]
    pack_into, unpack_head, entry_into = fixed.pack_into, _BATCH_HEAD.unpack_from, CQ_ENTRY.pack_into
    head = fixed.size
    block_len = len(topic_block)
    magic = MAGIC_V2 if block_len > MAX_TOPIC_V1_SIZE + 1 else MAGIC_V1
    grow = head + block_len - _BATCH_HEAD.size
    entries = bytearray(count * CQ_ENTRY.size)
    bpos = 0
    for epos in range(0, len(entries), CQ_ENTRY.size):
        size, _, _, flag, body_len = unpack_head(view, bpos)
        body_start = bpos + _BATCH_HEAD.size
        body_end = body_start + body_len
        body = view[body_start:body_end]
        record_size = size + grow
        record_end = pos + record_size
        pack_into(
            buf, pos, record_size, magic, crc32(body) & 0x7FFFFFFF, queue_id, flag, queue_offset,
            physical_offset, sys_flag, born_timestamp, born_host, store_timestamp, store_host, 0, 0, body_len,
        )  # fmt: skip
        p = pos + head
        buf[p : p + body_len] = body
        p += body_len
        buf[p : p + block_len] = topic_block
        buf[p + block_len : record_end] = view[body_end : bpos + size]  # PROPLEN + properties
        tag = 0
        if find(_TAGS_KEY, body_end + 2, bpos + size) >= 0:  # rarely worth a closer look
            found = find_property(raw[body_end + 2 : bpos + size], _TAGS_KEY)
            tag = tag_hash(found) if found else 0
        entry_into(entries, epos, physical_offset, record_size, tag)
        physical_offset += record_size
        queue_offset += 1
        pos = record_end
        bpos += size
    return entries


_TAGS_KEY = b"TAGS\x01"
_batch_c = load("batch")
if _batch_c is not None:  # the wrappers below are installed only then
    _c_scan, _c_write = _batch_c.scan_batch, _batch_c.write_batch_records


def _c_scan_batch(data: bytes | memoryview) -> tuple[int, int, int]:
    found = _c_scan(data)
    if found.__class__ is str:
        raise MessageDecodeError(found)
    return found


def _c_write_batch_records(*args) -> bytearray:
    """write_batch_records's arguments, with isal's CRC-32 and the tag hash for the C loop to call."""
    return _c_write(*args, crc32, tag_hash)


encode_batch = py_encode_batch if _batch_c is None else _batch_c.encode_batch
scan_batch = py_scan_batch if _batch_c is None else _c_scan_batch
write_batch_records = py_write_batch_records if _batch_c is None else _c_write_batch_records
