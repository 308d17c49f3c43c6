"""v2 `Message` <-> RocketMQ's stored message: system properties travel as the properties RocketMQ's
proxy uses (tag -> TAGS, keys -> KEYS, message_id -> UNIQ_KEY, message_group -> __SHARDINGKEY,
delivery_timestamp -> TIMER_DELIVER_MS), user properties as themselves, so 4.x and 5.x clients see
one message the same way. Pure functions: the producer and consumer handlers call them per message.
"""

from __future__ import annotations

import hashlib
import zlib

from google.protobuf.timestamp_pb2 import Timestamp

from ferrymq.protocol.message_ext import MessageExt
from ferrymq.protocol.pop import POP_CK
from ferrymq.protocol.properties import Prop
from ferrymq.proxy.v2 import messaging_pb2 as pb

# Properties the server owns: a user property may not carry these names (ILLEGAL_MESSAGE_PROPERTY_KEY).
RESERVED_KEYS = frozenset(
    (Prop.KEYS, Prop.TAGS, Prop.WAIT, Prop.DELAY, Prop.RETRY_TOPIC, Prop.REAL_TOPIC, Prop.REAL_QID,
     Prop.TRAN_MSG, Prop.PGROUP, Prop.MIN_OFFSET, Prop.MAX_OFFSET, Prop.UNIQ_KEY, Prop.MAX_RECONSUME_TIMES,
     Prop.RECONSUME_TIME, Prop.ORIGIN_MESSAGE_ID, Prop.TRANSACTION_ID, Prop.TRANSACTION_CHECK_TIMES,
     Prop.TIMER_DELIVER_MS, Prop.TIMER_DELAY_SEC, Prop.TIMER_DELAY_MS, Prop.SHARDING_KEY, POP_CK,
     "CHECK_IMMUNITY_TIME_IN_SECONDS")
)  # fmt: skip
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"  # first check-back of a half message after this
_GZIP_OR_ZLIB = 32 + zlib.MAX_WBITS  # zlib.decompress takes either header
_SYSTEM_KEYS = RESERVED_KEYS | {"CLUSTER", "__RETRY_TOPIC", "POP_CK_OFFSET", "1ST_POP_TIME"}


class IllegalMessage(ValueError):
    """A message the proxy refuses before storing it; `code` is the v2 code to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def to_stored(message: pb.Message) -> tuple[bytes, str]:
    """(body, properties text) to store `message` with. A GZIP body is stored as its content: 4.x
    consumers read stored bodies too, and know no gzip. Called per message sent: the properties
    text is built directly, in the order encode_properties would give."""
    sp = message.system_properties
    body = message.body
    if sp.body_encoding == pb.GZIP:
        try:
            body = zlib.decompress(body, _GZIP_OR_ZLIB)
        except zlib.error as e:
            raise IllegalMessage(pb.MESSAGE_CORRUPTED, f"body is not gzip: {e}") from None
    parts = []
    if message.user_properties:
        for key, value in message.user_properties.items():
            if key in RESERVED_KEYS or not key:
                raise IllegalMessage(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {key!r} is reserved")
            parts.append(f"{key}\x01{value}\x02")
    if sp.HasField("tag"):
        if not sp.tag.strip() or "|" in sp.tag:
            raise IllegalMessage(pb.ILLEGAL_MESSAGE_TAG, f"tag {sp.tag!r} is blank or contains '|'")
        parts.append(f"{Prop.TAGS}\x01{sp.tag}\x02")
    if sp.keys:
        parts.append(f"{Prop.KEYS}\x01{' '.join(sp.keys)}\x02")
    if sp.message_id:
        parts.append(f"{Prop.UNIQ_KEY}\x01{sp.message_id}\x02")
    if sp.HasField("message_group"):
        parts.append(f"{Prop.SHARDING_KEY}\x01{sp.message_group}\x02")
    if sp.HasField("delivery_timestamp"):
        parts.append(f"{Prop.TIMER_DELIVER_MS}\x01{sp.delivery_timestamp.ToMilliseconds()}\x02")
    if sp.message_type == pb.TRANSACTION:  # a half message; the topic names its producer group
        parts.append(f"{Prop.TRAN_MSG}\x01true\x02{Prop.PGROUP}\x01{message.topic.name}\x02")
        if sp.HasField("orphaned_transaction_recovery_duration"):
            parts.append(f"{CHECK_IMMUNITY}\x01{sp.orphaned_transaction_recovery_duration.ToSeconds()}\x02")
    return body, "".join(parts)


def queue_for_group(group: str, queue_count: int) -> int:
    """The write queue of a message group: a stable hash, so one group's messages stay in one queue
    (and in order) whichever client sends them."""
    digest = hashlib.sha256(group.encode()).digest()
    return int.from_bytes(digest[:8], "big") % queue_count


def set_millis(timestamp: Timestamp, millis: int) -> None:
    """Timestamp.FromMilliseconds without its Python-level checks (it runs for every message)."""
    timestamp.seconds, rest = divmod(millis, 1000)
    timestamp.nanos = rest * 1_000_000


def to_message(
    record: MessageExt, receipt_handle: str | None = None, message: pb.Message | None = None
) -> pb.Message:
    """The v2 message a consumer receives for a stored record, whose body the caller decompressed
    (message_ext.decompress_body: stored bodies may be LZ4 or zstd, which v2 clients cannot read);
    filled into `message` if given (a response's own, which then needs no copy)."""
    props = record.properties
    if message is None:
        message = pb.Message()
    message.body = record.body
    message.topic.name = props.get(Prop.RETRY_TOPIC) or record.topic
    for key, value in props.items():
        if key not in _SYSTEM_KEYS:
            message.user_properties[key] = value
    sp = message.system_properties
    tag = props.get(Prop.TAGS)
    if tag is not None:
        sp.tag = tag
    keys = props.get(Prop.KEYS)
    if keys:
        sp.keys.extend(keys.split())
    sp.message_id = record.msg_id
    # MD5 as RocketMQ's proxy sends it: every client checks it alike (Node 1.0.8 reads a CRC32 as decimal
    # and its PushConsumer drops a message whose checksum differs)
    sp.body_digest.type = pb.MD5
    sp.body_digest.checksum = hashlib.md5(record.body).hexdigest().upper()
    sp.body_encoding = pb.IDENTITY
    group = props.get(Prop.SHARDING_KEY)
    deliver_at = props.get(Prop.TIMER_DELIVER_MS)
    if group is not None:
        sp.message_type = pb.FIFO
        sp.message_group = group
    elif deliver_at is not None and deliver_at.isdigit():
        sp.message_type = pb.DELAY
        set_millis(sp.delivery_timestamp, int(deliver_at))
    elif props.get(Prop.TRAN_MSG) == "true":
        sp.message_type = pb.TRANSACTION
    else:
        sp.message_type = pb.NORMAL
    set_millis(sp.born_timestamp, record.born_timestamp)
    sp.born_host = record.born_host[0]
    set_millis(sp.store_timestamp, record.store_timestamp)
    sp.store_host = f"{record.store_host[0]}:{record.store_host[1]}"
    sp.queue_id = record.queue_id
    sp.queue_offset = record.queue_offset
    sp.delivery_attempt = record.reconsume_times + 1
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    return message
