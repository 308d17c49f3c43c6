"""Pop state as records in the revive topic: one checkpoint per popped batch, one ack per ack call.

They are ordinary messages of the system topic ``rmq_sys_REVIVE_LOG_<cluster>``, so the CommitLog
gives them durability (SYNC_FLUSH), crash recovery and replication; the revive service rebuilds its
open checkpoints from them on start. Bodies are small JSON objects with RocketMQ's short names.
"""

from __future__ import annotations

import msgspec

from ferrymq.protocol.errors import ProtocolError

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
CK_TAG, ACK_TAG = "ck", "ack"


def revive_topic(cluster: str) -> str:
    return REVIVE_TOPIC_PREFIX + cluster


class CheckpointRecord(msgspec.Struct, frozen=True):
    """A popped batch of one queue: the offsets handed out, invisible until pop_time + invisible."""

    group: str = msgspec.field(name="c")
    topic: str = msgspec.field(name="t")  # the topic read: the original one or its pop retry topic
    queue_id: int = msgspec.field(name="q")
    start_offset: int = msgspec.field(name="so")
    pop_time: int = msgspec.field(name="pt")
    invisible_time: int = msgspec.field(name="it")
    offsets: list[int] = msgspec.field(name="d")  # queue offsets, relative to start_offset
    revive_qid: int = msgspec.field(name="rq")  # as the handle says (999 for FIFO)
    order: bool = msgspec.field(name="o", default=False)
    reconsume: int = msgspec.field(name="rt", default=0)  # FIFO: the attempt count of this delivery

    @property
    def key(self) -> tuple[str, str, int, int, int]:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)


class AckRecord(msgspec.Struct, frozen=True):
    """Offsets of one checkpoint settled: acked by a consumer, or re-put by the revive service."""

    group: str = msgspec.field(name="c")
    topic: str = msgspec.field(name="t")
    queue_id: int = msgspec.field(name="q")
    start_offset: int = msgspec.field(name="so")
    pop_time: int = msgspec.field(name="pt")
    bits: int = msgspec.field(name="b")  # bit i: the checkpoint's i-th offset
    revived: bool = msgspec.field(name="r", default=False)

    @property
    def key(self) -> tuple[str, str, int, int, int]:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)


def settled(ck: CheckpointRecord, bits: int, revived: bool = False) -> AckRecord:
    """The ack record closing the offsets `bits` of checkpoint `ck`."""
    return AckRecord(ck.group, ck.topic, ck.queue_id, ck.start_offset, ck.pop_time, bits, revived)


_encoder = msgspec.json.Encoder()
_ck_decoder = msgspec.json.Decoder(CheckpointRecord)
_ack_decoder = msgspec.json.Decoder(AckRecord)


def encode(record: CheckpointRecord | AckRecord) -> bytes:
    return _encoder.encode(record)


def decode(tag: str, body: bytes | memoryview) -> CheckpointRecord | AckRecord:
    try:
        if tag == CK_TAG:
            return _ck_decoder.decode(body)
        if tag == ACK_TAG:
            return _ack_decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ProtocolError(f"bad revive record: {e}") from None
    raise ProtocolError(f"unknown revive record tag {tag!r}")
