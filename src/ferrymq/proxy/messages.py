"""v2 `Message` <-> RocketMQ's stored message: system properties travel as the properties RocketMQ's
proxy uses (tag -> TAGS, keys -> KEYS, message_id -> UNIQ_KEY, message_group -> __SHARDINGKEY,
delivery_timestamp -> TIMER_DELIVER_MS), user properties as themselves, so 4.x and 5.x clients see
one message the same way. Pure functions: the producer and consumer handlers call them per message.
"""

from __future__ import annotations

import hashlib
import zlib

from ferrymq.protocol.message_ext import MessageExt
from ferrymq.protocol.pop import POP_CK
from ferrymq.protocol.properties import Prop, encode_properties
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
    consumers read stored bodies too, and know no gzip."""
    sp = message.system_properties
    body = message.body
    if sp.body_encoding == pb.GZIP:
        try:
            body = zlib.decompress(body, _GZIP_OR_ZLIB)
        except zlib.error as e:
            raise IllegalMessage(pb.MESSAGE_CORRUPTED, f"body is not gzip: {e}") from None
    props: dict[str, str] = {}
    for key, value in message.user_properties.items():
        if key in RESERVED_KEYS or not key:
            raise IllegalMessage(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {key!r} is reserved")
        props[key] = value
    if sp.HasField("tag"):
        if not sp.tag.strip() or "|" in sp.tag:
            raise IllegalMessage(pb.ILLEGAL_MESSAGE_TAG, f"tag {sp.tag!r} is blank or contains '|'")
        props[Prop.TAGS] = sp.tag
    if sp.keys:
        props[Prop.KEYS] = " ".join(sp.keys)
    if sp.message_id:
        props[Prop.UNIQ_KEY] = sp.message_id
    if sp.HasField("message_group"):
        props[Prop.SHARDING_KEY] = sp.message_group
    if sp.HasField("delivery_timestamp"):
        props[Prop.TIMER_DELIVER_MS] = str(sp.delivery_timestamp.ToMilliseconds())
    if sp.message_type == pb.TRANSACTION:  # a half message; the topic names its producer group
        props[Prop.TRAN_MSG] = "true"
        props[Prop.PGROUP] = message.topic.name
        if sp.HasField("orphaned_transaction_recovery_duration"):
            props[CHECK_IMMUNITY] = str(sp.orphaned_transaction_recovery_duration.ToSeconds())
    return body, encode_properties(props)


def queue_for_group(group: str, queue_count: int) -> int:
    """The write queue of a message group: a stable hash, so one group's messages stay in one queue
    (and in order) whichever client sends them."""
    digest = hashlib.sha256(group.encode()).digest()
    return int.from_bytes(digest[:8], "big") % queue_count


def to_message(record: MessageExt, receipt_handle: str | None = None) -> pb.Message:
    """The v2 message a consumer receives for a stored record, whose body the caller decompressed
    (message_ext.decompress_body: stored bodies may be LZ4 or zstd, which v2 clients cannot read)."""
    props = record.properties
    message = pb.Message(body=record.body)
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
        sp.delivery_timestamp.FromMilliseconds(int(deliver_at))
    elif props.get(Prop.TRAN_MSG) == "true":
        sp.message_type = pb.TRANSACTION
    else:
        sp.message_type = pb.NORMAL
    sp.born_timestamp.FromMilliseconds(record.born_timestamp)
    sp.born_host = record.born_host[0]
    sp.store_timestamp.FromMilliseconds(record.store_timestamp)
    sp.store_host = f"{record.store_host[0]}:{record.store_host[1]}"
    sp.queue_id = record.queue_id
    sp.queue_offset = record.queue_offset
    sp.delivery_attempt = record.reconsume_times + 1
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    return message
