"""Storing a held-back message again under its real topic, and persisting how far that got."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.message import Prop, decode_record, encode_properties, pack_host
from ferrymq.store import MessageStore, PutResult, PutStatus

log = logging.getLogger(__name__)


def redeliver(
    store: MessageStore, record: memoryview, drop: Iterable[str], add: dict[str, str] | None = None
) -> PutResult:
    """Put the stored `record` to its REAL_TOPIC / REAL_QID with properties `drop`ped and `add`ed;
    body, flag, born time and host and reconsume times stay as they were."""
    try:
        msg = decode_record(record)
        props = msg.properties
        topic = props[Prop.REAL_TOPIC]
        queue_id = int(props[Prop.REAL_QID])
    except (MessageDecodeError, KeyError, ValueError) as e:
        # Nothing a retry could fix: report it and let the caller move past it.
        return PutResult(PutStatus.MESSAGE_ILLEGAL, f"held-back message cannot be redelivered: {e!r}")
    for key in drop:
        props.pop(key, None)
    if add:
        props.update(add)
    return store.put_message(
        topic, queue_id, msg.body, encode_properties(props), flag=msg.flag, sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp, born_host=pack_host(*msg.born_host),
        reconsume_times=msg.reconsume_times,
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
