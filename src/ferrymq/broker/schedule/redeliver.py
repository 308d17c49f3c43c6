"""Storing a held-back message again under its real topic, and persisting how far that got."""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterable

from ferrymq.protocol.message import (
    BLANK,
    BORNHOST_V6_FLAG,
    POS_BORNHOST,
    POS_BORNTIMESTAMP,
    POS_FLAG,
    STOREHOST_V6_FLAG,
    find_property,
    read_record_meta,
)
from ferrymq.store import MessageStore, PutResult, PutStatus

log = logging.getLogger(__name__)

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_REAL_TOPIC = b"REAL_TOPIC\x01"
_REAL_QID = b"REAL_QID\x01"


def prop_keys(*names: str) -> tuple[bytes, ...]:
    """Property names as `redeliver` drops them."""
    return tuple(f"{name}\x01".encode() for name in names)


def redeliver(store: MessageStore, record: memoryview, drop: Iterable[bytes], add: bytes = b"") -> PutResult:
    """Put the stored `record` (None: it is gone) to its REAL_TOPIC / REAL_QID with the properties
    named in `drop` (b"KEY\x01") left out and `add` (encoded properties) appended; body, flag, born
    time and host and reconsume times stay as they were. Bytes are sliced, never decoded: this runs
    per message."""
    meta = read_record_meta(record, 0, len(record)) if record is not None else None
    if meta is None or meta is BLANK:
        return PutResult(PutStatus.MESSAGE_ILLEGAL, "held-back message is not a whole record")
    props = bytes(record[meta.props_start : meta.props_end])
    topic = find_property(props, _REAL_TOPIC)
    queue_id = find_property(props, _REAL_QID)
    if not topic or queue_id is None or not queue_id.isdigit():
        return PutResult(PutStatus.MESSAGE_ILLEGAL, "held-back message has no REAL_TOPIC / REAL_QID")
    sys_flag = meta.sys_flag
    born_end = POS_BORNHOST + (20 if sys_flag & BORNHOST_V6_FLAG else 8)
    reconsume_at = born_end + 8 + (20 if sys_flag & STOREHOST_V6_FLAG else 8)
    kept = b"\x02".join(p for p in props.split(b"\x02") if p and not p.startswith(tuple(drop)))
    body = record[meta.body_start : meta.body_start + meta.body_len]
    return store.put_message(
        topic.decode(), int(queue_id), body, (kept + b"\x02" if kept else b"") + add,
        flag=_INT.unpack_from(record, POS_FLAG)[0], sys_flag=sys_flag,
        born_timestamp=_LONG.unpack_from(record, POS_BORNTIMESTAMP)[0],
        born_host=bytes(record[POS_BORNHOST:born_end]),
        reconsume_times=_INT.unpack_from(record, reconsume_at)[0],
    )  # fmt: skip


class DurableProgress:
    """Saves a service's progress only once the messages it redelivered are flushed to disk, so a
    crash at any moment redelivers (at least once) rather than loses: `note` a snapshot after a
    round, `save_if_flushed` from a periodic task, `save_now` at a clean stop."""

    def __init__(self, store: MessageStore, save: Callable[[object], None]) -> None:
        self.store = store
        self._save = save
        self._waiting: tuple[object, int] | None = None  # (snapshot, CommitLog offset it needs flushed)
        self._latest: object | None = None
        self._saved: object | None = None

    def note(self, snapshot: object) -> None:
        self._latest = snapshot

    def save_if_flushed(self) -> None:
        if self._waiting is not None and self.store.commitlog.flushed_offset >= self._waiting[1]:
            self._write(self._waiting[0])
            self._waiting = None
        if self._waiting is None and self._latest is not None and self._latest != self._saved:
            self._waiting = (self._latest, self.store.commitlog.max_offset)

    def save_now(self) -> None:
        """At a clean stop, after the CommitLog was flushed."""
        if self._latest is not None and self._latest != self._saved:
            self._write(self._latest)

    def _write(self, snapshot: object) -> None:
        self._save(snapshot)
        self._saved = snapshot
