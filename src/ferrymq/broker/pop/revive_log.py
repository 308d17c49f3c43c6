"""Writing and replaying the revive topic's records (checkpoints and acks)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ferrymq.broker.pop import records
from ferrymq.broker.pop.records import AckRecord, CheckpointRecord
from ferrymq.ha.dledger.command import PutCommand
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.message_ext import decode_records
from ferrymq.store import MessageStore, PutResult, PutStatus

if TYPE_CHECKING:
    from ferrymq.broker.pop.revive import Submit

log = logging.getLogger(__name__)

_CK = b"TAGS\x01ck\x02"
_ACK = b"TAGS\x01ack\x02"


class ReviveLog:
    def __init__(
        self, store: MessageStore, submit: Submit, topic: str, queue_num: int, replicate: Callable[[], None]
    ) -> None:
        """`submit`: the broker writer's (the queue offset it answers is the record's: nothing else
        writes the revive topic); `replicate()`: new CommitLog bytes for the replicas. Records are
        not dispatched at once (no one reads them until a restart or a promotion): the store's
        dispatcher thread takes them, which keeps two dispatch passes per pop and ack off the
        event loop."""
        self.store = store
        self._submit = submit
        self.topic = topic
        self.queue_num = queue_num
        self._replicate = replicate

    def append(self, queue: int, record: CheckpointRecord | AckRecord) -> PutResult:
        props = _CK if type(record) is CheckpointRecord else _ACK
        result = self._submit(PutCommand(self.topic, queue, records.encode(record), props))
        if result.status is PutStatus.PUT_OK:
            self._replicate()
        return result

    def replay(self, queue: int, offset: int) -> Iterator[tuple[int, CheckpointRecord | AckRecord]]:
        """(queue offset, record) of every record from `offset` on; unreadable ones are skipped."""
        store = self.store
        while True:
            found = store.get_messages(self.topic, queue, offset, 256, 1 << 20)
            if not found.message_count:
                if found.next_begin_offset <= offset:
                    return
                offset = found.next_begin_offset
                continue
            for buffer in found.buffers:
                for message in decode_records(buffer):
                    try:
                        yield message.queue_offset, records.decode(message.tags or "", message.body)
                    except ProtocolError as e:
                        log.error("revive record %s@%d skipped: %s", self.topic, message.queue_offset, e)
            offset = found.next_begin_offset
