"""A put as a Raft entry's body: what every member of the group stores when the entry commits.

The leader decides everything a put depends on (topic and queue after diversion, properties,
flags, born time and host) before it proposes, so each member's store puts the same message in the
same order and assigns it the same queue offset. Layout, big-endian::

    version u8 | batch u8 | queue_id i32 | flag i32 | sys_flag i32 | born_timestamp i64
    | reconsume_times i32 | prepared_transaction_offset i64 | born_host (u8 length + bytes)
    | topic (u16 length + UTF-8) | properties (u32 length + bytes) | body (the rest)

A batch's body is RocketMQ's batch encoding, as the producer sent it. Version 1 had no
prepared_transaction_offset (a transaction's commit record names its half message with it); its
entries still decode, with 0 there.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ferrymq.protocol.errors import ProtocolError

VERSION = 2
FIXED = struct.Struct(">BBiiiqi")
PREPARED = struct.Struct(">q")  # version 2 on
OTHER_LAYOUT = (
    "its leader runs %s, this member %s (a mixed group: each member refuses the other kind's entries, "
    "see docs/dledger.md, Mixed groups)"
)


class CommandError(ProtocolError):
    """An entry body that is not a put command."""


@dataclass(frozen=True, slots=True)
class PutCommand:
    topic: str
    queue_id: int
    body: bytes | memoryview
    properties: bytes | memoryview = b""
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b""
    reconsume_times: int = 0
    batch: bool = False
    prepared_transaction_offset: int = 0


def encode(c: PutCommand) -> list[bytes | memoryview]:
    """The body as parts: the head, then the message body (not copied)."""
    topic = c.topic.encode()
    head = b"".join(
        (
            FIXED.pack(VERSION, c.batch, c.queue_id, c.flag, c.sys_flag, c.born_timestamp, c.reconsume_times),
            PREPARED.pack(c.prepared_transaction_offset),
            bytes((len(c.born_host),)),
            c.born_host,
            len(topic).to_bytes(2, "big"),
            topic,
            len(c.properties).to_bytes(4, "big"),
            c.properties,
        )
    )
    return [head, c.body]


def starts_as_command(body: bytes | memoryview) -> bool:
    """Whether `body` starts as a put command does (its version): the two files' entry bodies. A
    body of DLedger's single log starts with its first record's size, whose first byte is 0."""
    return len(body) > 0 and body[0] in (1, VERSION)


def decode(buf: bytes | memoryview) -> PutCommand:
    """The command in `buf`; its body and properties are views of `buf`."""
    view = memoryview(buf)
    try:
        version, batch, queue_id, flag, sys_flag, born, reconsume = FIXED.unpack_from(view)
        if version not in (1, VERSION):
            raise CommandError(f"put command version {version}, expected 1 or {VERSION}")
        at = FIXED.size
        prepared = 0
        if version > 1:
            (prepared,) = PREPARED.unpack_from(view, at)
            at += PREPARED.size
        n = view[at]
        host_at = at
        host = bytes(view[at + 1 : at + 1 + n])
        at += 1 + n
        n = int.from_bytes(view[at : at + 2], "big")
        topic = bytes(view[at + 2 : at + 2 + n]).decode()
        at += 2 + n
        n = int.from_bytes(view[at : at + 4], "big")
        props = view[at + 4 : at + 4 + n]
        at += 4 + n
        if len(host) != view[host_at] or len(props) != n or at > len(view):
            raise CommandError("put command truncated")
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise CommandError(f"malformed put command: {e}") from None
    return PutCommand(
        topic, queue_id, view[at:], props, flag, sys_flag, born, host, reconsume, bool(batch), prepared
    )
