"""Message trace: producers and push consumers record what happened to each message, off the hot path.

As RocketMQ's client trace module does: a send adds a Pub record, a consume a SubBefore and a
SubAfter record per message, a transaction's end an EndTransaction record. Records wait in a bounded
buffer (a full buffer drops new records and counts them: tracing never slows or blocks a send) and a
background task writes them in batches to the trace topic (RMQ_SYS_TRACE_TOPIC unless told
otherwise), each trace message at most 128,000 bytes, keyed by the msgIds and business keys it holds
so `QUERY_MESSAGE` finds a message's trace by its id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, TypedDict

from ferrymq.client.aio import finish
from ferrymq.client.message import Message, MessageExt, SendResult, SendStatus
from ferrymq.client.uniq_key import UniqKeyGenerator
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.protocol.properties import Prop
from ferrymq.protocol.trace import (
    KEY_SEPARATOR,
    MAX_TRACE_BODY,
    TRACE_PRODUCER_GROUP_PREFIX,
    TRACE_TOPIC,
    EndTransactionRecord,
    MessageType,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceRecord,
    TransactionState,
    batch_keys,
    encode_record,
    record_keys,
)

if TYPE_CHECKING:
    from ferrymq.client.hooks import Hooks
    from ferrymq.client.instance import ClientInstance

log = logging.getLogger(__name__)

DEFAULT_REGION = "DefaultRegion"
MAX_KEYS_BYTES = 24_000  # about the KEYS of one trace message: properties hold at most 32,767 bytes
MAX_SENDS_IN_FLIGHT = 4
_BODY_OF, _KEYS_OF = attrgetter("body"), attrgetter("keys")
CONSUME_SUCCESS, CONSUME_FAILED = 0, 4  # RocketMQ's ConsumeReturnType ordinals (SUCCESS, FAILED)
_Entry = tuple[str, list[str], int]  # records encoded, the index keys of their trace message, how many


class TraceDispatcher:
    """A bounded buffer of trace records and the task that writes them to the trace topic; as an
    extension of a client's hooks, it records that client's sends, consumes and transaction ends."""

    def __init__(self, instance: ClientInstance, owner_group: str, topic: str | None = None, *,
                 max_pending: int = 20_000, batch_records: int = 500, linger: float = 0.1):  # fmt: skip
        from ferrymq.client.producer import Producer  # the producer module creates dispatchers

        self.instance = instance
        self.group = owner_group
        self.topic = topic or TRACE_TOPIC
        self.producer = Producer(  # compressed like RocketMQ's, but fast: level 1 shrinks records ~15x
            f"{TRACE_PRODUCER_GROUP_PREFIX}-{owner_group}", ";".join(instance.namesrvs), instance=instance,
            compress_level=1,
        )  # fmt: skip
        self.max_pending = max_pending
        self.batch_records = batch_records
        self.linger = linger
        self.dropped = 0  # records not written because the buffer was full
        self.failed = 0  # records whose trace message could not be sent
        self.written = 0
        self.pending = 0  # records in the buffer
        self._pending: deque[_Entry] = deque()
        self._wake = asyncio.Event()
        self._tasks: BackgroundTasks | None = None
        self._writer: asyncio.Task | None = None
        self._stopping = False
        self._sending = asyncio.Semaphore(MAX_SENDS_IN_FLIGHT)

    def install(self, hooks: Hooks) -> None:
        """Trace what the client of these hooks does: a producer's sends and transaction ends, a
        push consumer's listener calls (a client only calls the hooks of what it does)."""
        hooks.send.append(SendTracer(self, self.group, self.instance))
        hooks.consume.append(ConsumeTracer(self))
        hooks.end_transaction.append(EndTransactionTracer(self, self.group))

    def add(self, record: TraceRecord, index_keys: list[str] | None = None) -> None:
        """Queue a record, its trace message indexed under `index_keys` (default: its msgId and
        keys); never blocks, drops (and counts) when the buffer is full."""
        try:
            text = encode_record(record)
        except ValueError as e:
            log.warning("trace: record skipped: %s", e)
            return
        if index_keys is None:
            index_keys = record_keys(record) if record.keys else [record.msg_id]
        self.add_encoded(text, index_keys, 1)

    def add_encoded(self, text: str, keys: list[str], count: int) -> None:
        """Queue `count` records already encoded as `text`, with their index keys; all of them are
        dropped (and counted) when they do not fit the buffer."""
        if self.pending + count > self.max_pending:
            self.dropped += count
            return
        self._pending.append((text, keys, count))
        self.pending += count
        if self.pending >= self.batch_records:
            self._wake.set()

    async def start(self) -> None:
        if self._tasks is None:
            await self.producer.start()
            self._stopping = False
            self._tasks = BackgroundTasks(f"message trace of {self.group}")
            self._writer = self._tasks.spawn(self._run(self._tasks), name=f"trace writer {self.group}")

    async def stop(self, timeout: float = 5.0) -> None:
        """Write what is buffered (for at most `timeout` s), then stop."""
        tasks, writer = self._tasks, self._writer
        if tasks is None or writer is None:
            return
        self._stopping = True
        self._wake.set()
        if not await finish([writer], timeout):
            log.warning("trace: %d records not written at shutdown", len(self._pending))
        await tasks.close()
        self._tasks = self._writer = None
        await self.producer.shutdown()

    async def _run(self, tasks: BackgroundTasks) -> None:
        while self._pending or not self._stopping:
            if self.pending < self.batch_records and not self._stopping:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.linger)
                self._wake.clear()
            batch, taken = [], 0
            while self._pending and taken < self.batch_records:
                batch.append(self._pending.popleft())
                taken += batch[-1][2]
            self.pending -= taken
            for message, count in _trace_messages(self.topic, batch):
                await self._sending.acquire()  # a few sends in flight keep up with a busy producer
                tasks.spawn(self._send(message, count), name=f"trace send {self.group}")
        for _ in range(MAX_SENDS_IN_FLIGHT):  # every send in flight has finished once all slots are free
            await self._sending.acquire()
        for _ in range(MAX_SENDS_IN_FLIGHT):
            self._sending.release()

    async def _send(self, message: Message, count: int) -> None:
        try:
            await self.producer.send(message)
            self.written += count
        except Exception as e:  # a trace is best effort: never let it stop the writer
            self.failed += count
            log.warning("trace: cannot write %d records to %s: %s", count, self.topic, e)
        finally:
            self._sending.release()


def _trace_messages(topic: str, entries: list[_Entry]):
    """(trace message, records in it) for a batch: bodies up to MAX_TRACE_BODY, keys bounded."""
    parts: list[str] = []
    keys: dict[str, None] = {}
    size = keys_size = count = 0
    for text, entry_keys, records in entries:
        entry_keys_size = sum(map(len, entry_keys)) + len(entry_keys)
        if parts and (size + len(text) > MAX_TRACE_BODY or keys_size + entry_keys_size > MAX_KEYS_BYTES):
            yield _trace_message(topic, parts, keys), count
            parts, keys, size, keys_size, count = [], {}, 0, 0, 0
        parts.append(text)
        size += len(text)
        count += records
        keys.update(dict.fromkeys(entry_keys))
        keys_size += entry_keys_size
    if parts:
        yield _trace_message(topic, parts, keys), count


def _trace_message(topic: str, parts: list[str], keys: dict[str, None]) -> Message:
    keys.pop("", None)  # the key of a record without an id
    return Message(topic, "".join(parts).encode(), keys=list(keys))


def _keys(keys: list[str] | str | None) -> str:
    return keys if isinstance(keys, str) else " ".join(keys or ())


def _msg_type(message: Message) -> MessageType:
    if message.properties and message.properties.get(Prop.TRAN_MSG) == "true":
        return MessageType.TRANS_HALF
    return MessageType.DELAY if message.delay_level else MessageType.NORMAL


class _SharedPubFields(TypedDict):
    """The PubRecord fields that every record of one send shares."""

    timestamp: int
    region_id: str
    group: str
    topic: str
    store_host: str
    cost_time: int
    success: bool


class SendTracer:
    """The producer's send hook: one Pub record per send, as RocketMQ's clients write it (failed
    sends are not traced). A batch's record holds its messages' ids joined by commas; its trace
    message is indexed under the batch keys of those ids (see batch_keys) and their keys, so every
    message's trace is found with a key or two per batch rather than one per message."""

    def __init__(self, dispatcher: TraceDispatcher, group: str, instance: ClientInstance) -> None:
        self.dispatcher = dispatcher
        self.group = group
        self.instance = instance

    def __call__(self, messages: Sequence[Message], result: SendResult | None, started_ms: int, cost_ms: int):
        if result is None or not result.trace_on or messages[0].topic == self.dispatcher.topic:
            return
        topic = messages[0].topic
        route = self.instance.routes.get(topic)
        send: _SharedPubFields = {  # what the send's records share
            "timestamp": started_ms, "region_id": result.region_id, "group": self.group, "topic": topic,
            "store_host": route.masters.get(result.message_queue.broker_name, "") if route else "",
            "cost_time": cost_ms, "success": result.status is SendStatus.SEND_OK,
        }  # fmt: skip
        if len(messages) == 1:
            m = messages[0]
            self.dispatcher.add(PubRecord(
                **send, msg_id=result.msg_id, tags=m.tags or "", keys=_keys(m.keys), body_length=len(m.body),
                msg_type=_msg_type(m), offset_msg_id=result.offset_msg_id,
            ))  # fmt: skip
        else:
            self._add_batch(send, messages, result.msg_id, result.offset_msg_id)

    def _add_batch(
        self, send: _SharedPubFields, messages: Sequence[Message], msg_ids: str, offset_msg_ids: str
    ):
        """One record for the batch, indexed under its batch keys and its messages' keys; halved
        until the keys of each part fit a trace message. Runs once per send: kept to C-level loops."""
        n = len(messages)
        ids = msg_ids.split(",")
        keys = []
        if any(map(_KEYS_OF, messages)):  # the messages' business keys, for the record and its index
            keys = KEY_SEPARATOR.join(map(_keys, map(_KEYS_OF, messages))).split(KEY_SEPARATOR)
            keys = [k for k in keys if k]
        index = batch_keys(ids) + keys
        if n > 1 and sum(map(len, index)) + len(index) > MAX_KEYS_BYTES:
            half, offset_ids = n // 2, offset_msg_ids.split(",")
            for part in (slice(None, half), slice(half, None)):
                self._add_batch(send, messages[part], ",".join(ids[part]), ",".join(offset_ids[part]))
            return
        self.dispatcher.add(PubRecord(
            **send, msg_id=msg_ids, tags="", keys=KEY_SEPARATOR.join(keys),
            body_length=sum(map(len, map(_BODY_OF, messages))), msg_type=MessageType.NORMAL,
            offset_msg_id=offset_msg_ids,
        ), index)  # fmt: skip


class ConsumeTracer:
    """The push consumer's consume hook: SubBefore and SubAfter records around each listener call."""

    def __init__(self, dispatcher: TraceDispatcher) -> None:
        self.dispatcher = dispatcher
        self._ids = UniqKeyGenerator()

    def before(self, group: str, messages: list[MessageExt]):
        if messages[0].topic == self.dispatcher.topic:
            return None
        request_id, now = self._ids.next(), time.time_ns() // 1_000_000
        for m in messages:
            self.dispatcher.add(SubBeforeRecord(
                timestamp=now, region_id=m.properties.get("MSG_REGION", DEFAULT_REGION), group=group,
                request_id=request_id, msg_id=m.msg_id, retry_times=m.reconsume_times, keys=_keys(m.keys),
            ))  # fmt: skip
        return group, request_id, now, messages

    def after(self, context, success: bool) -> None:
        if context is None:
            return
        group, request_id, started, messages = context
        now = time.time_ns() // 1_000_000
        cost = (now - started) // len(messages)
        code = CONSUME_SUCCESS if success else CONSUME_FAILED
        for m in messages:
            self.dispatcher.add(SubAfterRecord(
                request_id=request_id, msg_id=m.msg_id, cost_time=cost, success=success, keys=_keys(m.keys),
                context_code=code, timestamp=now, group=group,
            ))  # fmt: skip


class EndTransactionTracer:
    """The transaction producer's end hook: one EndTransaction record per end sent to a broker."""

    def __init__(self, dispatcher: TraceDispatcher, group: str) -> None:
        self.dispatcher = dispatcher
        self.group = group

    def __call__(self, message: Message | MessageExt, msg_id: str, broker_addr: str, transaction_id: str,
                 state: TransactionState, from_check: bool) -> None:  # fmt: skip
        self.dispatcher.add(EndTransactionRecord(
            timestamp=time.time_ns() // 1_000_000, region_id=DEFAULT_REGION, group=self.group,
            topic=message.topic, msg_id=msg_id, tags=message.tags or "", keys=_keys(message.keys),
            store_host=broker_addr, msg_type=MessageType.TRANS_COMMIT, transaction_id=transaction_id or "",
            transaction_state=state, from_transaction_check=from_check,
        ))  # fmt: skip
