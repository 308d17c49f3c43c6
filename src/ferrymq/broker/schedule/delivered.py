"""What the CommitLog itself says was delivered: every redelivery of a held-back message names the
record it came from (SCHEDULE_ORIGIN_OFFSET, its CommitLog offset), so a broker taking over the
scheduled-message duties — a slave acting for its missing master, a promoted slave, the master
taking them back, a master restarted after a crash — counts the redeliveries stored after its
progress was last saved or copied instead of delivering them again.

The walk starts at the progress's `log_offset`, before which every redelivery is counted in it,
so it reads only the records written since (seconds of traffic), once per takeover. It also reads
the master's delivery intents (intents.py): a message named by one and not redelivered is undecided.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from typing import NamedTuple

from ferrymq.broker.schedule.intents import INTENT_TOPIC, decode_origins
from ferrymq.protocol.properties import Prop, find_property
from ferrymq.protocol.record import BLANK, RecordMeta, read_record_meta
from ferrymq.store import MessageStore

ORIGIN_OFFSET = "SCHEDULE_ORIGIN_OFFSET"
_ORIGIN_KEY = f"{ORIGIN_OFFSET}\x01".encode()
_UNIQ_KEY = f"{Prop.UNIQ_KEY}\x01".encode()


def origin_property(commitlog_offset: int) -> bytes:
    """The encoded property a redelivery of the held-back record at `commitlog_offset` carries."""
    return b"%s%d\x02" % (_ORIGIN_KEY, commitlog_offset)


class Recount(NamedTuple):
    delivered: dict[int, set[int]]
    """queue id → queue offsets of the held-back messages redelivered"""
    undecided: set[int]
    """CommitLog offsets of the held-back messages an intent names and no redelivery followed"""


def delivered_since(store: MessageStore, start: int, topic: str) -> Recount:
    """What the records stored from CommitLog offset `start` on say of the held-back messages of
    `topic`. A redelivery counts only if the record it names is a message of `topic` with the same
    UNIQ_KEY (a property copied along by a client proves nothing else)."""
    found: dict[int, set[int]] = {}
    intended: dict[int, tuple[int, int]] = {}  # CommitLog offset -> (queue id, queue offset)
    for buf, meta in _records(store, start):
        if meta.topic == INTENT_TOPIC:
            for named in decode_origins(buf[meta.body_start : meta.body_start + meta.body_len]):
                held = _held(store, named, topic)
                if held is not None:
                    intended[named] = (held[1].queue_id, held[1].queue_offset)
            continue
        origin = find_property(buf[meta.props_start : meta.props_end], _ORIGIN_KEY)
        if origin is None or not origin.isdigit():
            continue
        held = _held(store, int(origin), topic)
        if held is None:
            continue
        record, held_meta = held
        uniq = find_property(buf[meta.props_start : meta.props_end], _UNIQ_KEY)
        if uniq != find_property(bytes(record[held_meta.props_start : held_meta.props_end]), _UNIQ_KEY):
            continue
        found.setdefault(held_meta.queue_id, set()).add(held_meta.queue_offset)
    undecided = {o for o, (queue_id, offset) in intended.items() if offset not in found.get(queue_id, ())}
    return Recount(found, undecided)


def _held(store: MessageStore, offset: int, topic: str) -> tuple[memoryview, RecordMeta] | None:
    """The record at CommitLog `offset` and its header, if it is a message of `topic`."""
    held = store.look_message_by_offset(offset)
    meta = read_record_meta(held, 0, len(held)) if held is not None else None
    return None if held is None or meta is None or meta is BLANK or meta.topic != topic else (held, meta)


def _records(store: MessageStore, start: int) -> Iterator[tuple[mmap.mmap, RecordMeta]]:
    """(segment map, record) of every record from `start` (a record boundary) to the log's end."""
    commitlog = store.commitlog
    end = commitlog.max_offset
    offset = max(start, commitlog.min_offset)
    while offset < end:
        segment = commitlog.segment_for(offset)
        if segment is None:
            return
        pos, limit = offset - segment.base, min(end, segment.end) - segment.base
        while pos < limit:
            meta = read_record_meta(segment.mm, pos, limit)
            if meta is None:
                return  # no whole record: a torn tail, nothing written after it
            if meta is BLANK:
                break
            yield segment.mm, meta
            pos += meta.size
        offset = segment.end
