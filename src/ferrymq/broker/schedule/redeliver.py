"""Storing a held-back message again under its real topic: the put that does it."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from ferrymq.ha.dledger.command import PutCommand
from ferrymq.protocol.properties import find_property
from ferrymq.protocol.record import BLANK, POS_BORNHOST, POS_BORNTIMESTAMP, POS_FLAG, read_record_meta
from ferrymq.protocol.sys_flag import BORNHOST_V6_FLAG, STOREHOST_V6_FLAG

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_REAL_TOPIC = b"REAL_TOPIC\x01"
_REAL_QID = b"REAL_QID\x01"


def prop_keys(*names: str) -> tuple[bytes, ...]:
    """Property names as `redeliver` drops them."""
    return tuple(f"{name}\x01".encode() for name in names)


def redelivery(record: memoryview | None, drop: Iterable[bytes], add: bytes = b"") -> PutCommand | str:
    """The put of the stored `record` (None: it is gone) to its REAL_TOPIC / REAL_QID with the
    properties named in `drop` (b"KEY\x01") left out and `add` (encoded properties) appended; body,
    flag, born time and host and reconsume times stay as they were. Or why there is none. Bytes are
    sliced, never decoded: this runs per message."""
    if record is None:
        return "held-back message is no longer stored"
    meta = read_record_meta(record, 0, len(record))
    if meta is None or meta is BLANK:
        return "held-back message is not a whole record"
    props = bytes(record[meta.props_start : meta.props_end])
    topic = find_property(props, _REAL_TOPIC)
    queue_id = find_property(props, _REAL_QID)
    if not topic or queue_id is None or not queue_id.isdigit():
        return "held-back message has no REAL_TOPIC / REAL_QID"
    sys_flag = meta.sys_flag
    born_end = POS_BORNHOST + (20 if sys_flag & BORNHOST_V6_FLAG else 8)
    reconsume_at = born_end + 8 + (20 if sys_flag & STOREHOST_V6_FLAG else 8)
    kept = b"\x02".join(p for p in props.split(b"\x02") if p and not p.startswith(tuple(drop)))
    body = record[meta.body_start : meta.body_start + meta.body_len]
    return PutCommand(
        topic.decode(),
        int(queue_id),
        body,
        (kept + b"\x02" if kept else b"") + add,
        _INT.unpack_from(record, POS_FLAG)[0],
        sys_flag,
        _LONG.unpack_from(record, POS_BORNTIMESTAMP)[0],
        bytes(record[POS_BORNHOST:born_end]),
        _INT.unpack_from(record, reconsume_at)[0],
    )
