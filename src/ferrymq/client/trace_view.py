"""A message's life read back from the trace topic: sent, stored, consumed by whom, dead-lettered or not.

The trace messages holding a message's records are found by QUERY_MESSAGE with its msgId as key (the
trace writer keys every trace message by the msgIds in it). Where it is stored comes from the broker
itself (VIEW_MESSAGE_BY_ID with the offset id of the Pub record), and dead letters from a key look-up
of the msgId in `%DLQ%<group>` of each group that consumed it.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

from ferrymq.client.instance import ClientError, ClientInstance
from ferrymq.net import RemotingError
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.message_ext import (
    CompressedBodyError,
    MessageExt,
    decode_record,
    decode_records,
    decompress_body,
)
from ferrymq.protocol.message_id import parse_offset_msg_id
from ferrymq.protocol.properties import Prop
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.protocol.topic_names import HALF_TOPIC
from ferrymq.protocol.trace import (
    TRACE_TOPIC,
    EndTransactionRecord,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceRecord,
    batch_keys,
    pub_for,
)
from ferrymq.protocol.trace import decode_records as decode_trace

DLQ_PREFIX = "%DLQ%"
_QUERY_MAX = 64


@dataclass
class ConsumeAttempt:
    """One delivery to a consumer group: SubBefore, and its SubAfter once the listener finished."""

    request_id: str
    started: int  # ms
    retry_times: int
    cost_ms: int | None = None  # None: no SubAfter (still running, or the client died)
    success: bool | None = None


@dataclass
class GroupConsumption:
    group: str
    attempts: list[ConsumeAttempt] = field(default_factory=list)
    dead_lettered: bool = False

    @property
    def consumed(self) -> bool:
        return any(a.success for a in self.attempts)


@dataclass
class MessageTrace:
    msg_id: str
    sends: list[PubRecord] = field(default_factory=list)
    stored: MessageExt | None = None
    stored_at: str = ""  # the broker address holding it
    groups: dict[str, GroupConsumption] = field(default_factory=dict)
    transaction: list[EndTransactionRecord] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return bool(self.sends or self.groups or self.transaction)


async def message_trace(
    instance: ClientInstance, msg_id: str, trace_topic: str = TRACE_TOPIC
) -> MessageTrace:
    """Everything the trace topic and the brokers know about message `msg_id`."""
    route = await instance.existing_route(trace_topic)
    if route is None:
        raise ClientError(f"trace topic {trace_topic} does not exist: is trace enabled on the clients?")
    records: list[TraceRecord] = []
    for addr in route.masters.values():
        found = {}  # a trace message may hold records found under either key
        for key in (msg_id, *batch_keys([msg_id])):
            messages = await query_by_key(instance, addr, trace_topic, key)
            found.update({m.commitlog_offset: m for m in messages})
        for trace_message in found.values():
            try:
                records += _about(decode_trace(trace_message.body), msg_id)
            except ProtocolError:
                continue  # not a trace message we can read: skip it, as RocketMQ's reader does
    trace = _assemble(msg_id, records)
    await _locate(instance, trace)
    for consumption in trace.groups.values():
        for addr in route.masters.values():
            dlq = await query_by_key(instance, addr, DLQ_PREFIX + consumption.group, msg_id)
            consumption.dead_lettered = consumption.dead_lettered or bool(dlq)
    return trace


def _about(records: list[TraceRecord], msg_id: str) -> list[TraceRecord]:
    """The records about message `msg_id` (a batch's Pub record narrowed to it)."""
    about: list[TraceRecord] = []
    for r in records:
        found = pub_for(r, msg_id) if isinstance(r, PubRecord) else r
        if found is not None and found.msg_id == msg_id:
            about.append(found)
    return about


def _assemble(msg_id: str, records: list[TraceRecord]) -> MessageTrace:
    trace = MessageTrace(msg_id)
    attempts: dict[tuple[str, str], ConsumeAttempt] = {}
    afters: list[SubAfterRecord] = []
    for r in sorted(records, key=lambda r: r.timestamp):
        if isinstance(r, PubRecord):
            trace.sends.append(r)
        elif isinstance(r, EndTransactionRecord):
            trace.transaction.append(r)
        elif isinstance(r, SubBeforeRecord):
            attempt = ConsumeAttempt(r.request_id, r.timestamp, r.retry_times)
            attempts[(r.group, r.request_id)] = attempt
            trace.groups.setdefault(r.group, GroupConsumption(r.group)).attempts.append(attempt)
        else:
            afters.append(r)
    for r in afters:
        attempted = attempts.get((r.group, r.request_id)) or next(
            (a for (_, rid), a in attempts.items() if rid == r.request_id), None
        )
        if attempted is not None:
            attempted.cost_ms, attempted.success = r.cost_time, r.success
    return trace


async def _locate(instance: ClientInstance, trace: MessageTrace) -> None:
    """Ask the broker named by the (last successful) Pub record's offset id for the stored message."""
    offset_id = next((p.offset_msg_id for p in reversed(trace.sends) if p.success and p.offset_msg_id), None)
    if offset_id is None:
        return
    try:
        ip, port, offset = parse_offset_msg_id(offset_id)
    except ProtocolError:
        return
    addr = f"{ip}:{port}"
    request = RemotingCommand(RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": str(offset)})
    try:
        response = await instance.invoke(addr, request)
        if response.code != ResponseCode.SUCCESS:
            return
        trace.stored, trace.stored_at = _readable(decode_record(response.body)), addr
        real_topic = trace.stored.properties.get(Prop.REAL_TOPIC)
        if trace.stored.topic == HALF_TOPIC and real_topic:  # a transaction's half: find its commit
            committed = [
                m
                for m in await query_by_key(instance, addr, real_topic, trace.msg_id)
                if m.topic == real_topic
            ]
            trace.stored = committed[0] if committed else trace.stored
    except (RemotingError, ProtocolError, ClientError):
        return


async def query_by_key(instance: ClientInstance, addr: str, topic: str, key: str) -> list[MessageExt]:
    """QUERY_MESSAGE on one broker: messages of `topic` with `key` (empty when there are none)."""
    ext = {"topic": topic, "key": key, "maxNum": str(_QUERY_MAX), "beginTimestamp": "0",
           "endTimestamp": str(int(time.time() * 1000) + 86_400_000)}  # fmt: skip
    try:
        response = await instance.invoke(addr, RemotingCommand(RequestCode.QUERY_MESSAGE, ext_fields=ext))
    except RemotingError as e:
        raise ClientError(f"cannot query {topic} on {addr}: {e}") from None
    if response.code != ResponseCode.SUCCESS:
        return []
    try:
        return [_readable(m) for m in decode_records(response.body)]
    except ProtocolError:
        return []


def _readable(m: MessageExt) -> MessageExt:
    """The message with its body decompressed, or as stored when it does not decompress: a trace
    message then fails to decode and is skipped, and a found message still counts as found."""
    with contextlib.suppress(CompressedBodyError):
        decompress_body(m)
    return m
