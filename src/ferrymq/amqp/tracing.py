"""Message trace for AMQP queues with x-message-trace (or the message-trace policy key): the gateway
writes RocketMQ's trace records into RMQ_SYS_TRACE_TOPIC as a RocketMQ client would — Pub when a
publish is stored in the queue, SubBefore and SubAfter when a delivery is acknowledged (or rejected) —
so `ferrymq admin trace MSG_ID` shows an AMQP message's life. Records go out in batches, keyed by
message id and AMQP message id, never on the publish's own path."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import TYPE_CHECKING

from ferrymq.protocol.properties import Prop, encode_properties
from ferrymq.protocol.trace import (
    KEY_SEPARATOR,
    MAX_TRACE_BODY,
    TRACE_TOPIC,
    MessageType,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceRecord,
    encode_record,
    record_keys,
)

if TYPE_CHECKING:
    from ferrymq.amqp.gateway import Gateway
    from ferrymq.messaging.api import SendOutcome
    from ferrymq.meta.entities import Queue
    from ferrymq.protocol.message_ext import MessageExt

log = logging.getLogger(__name__)
REGION = "DefaultRegion"
FLUSH_AFTER_S = 0.1


def producer_group(vhost: str) -> str:
    return f"AMQP_PUBLISHERS-{vhost}"


class Tracer:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self._pending: list[str] = []  # encoded records
        self._keys: dict[str, None] = {}
        self._size = 0
        self._flush: asyncio.TimerHandle | None = None

    def published(
        self, queue: Queue, outcome: SendOutcome, routing_keys: list[str], sizes: list[int]
    ) -> None:
        """Pub records for messages stored in `queue` by one put (one message or a batch)."""
        now = int(time.time() * 1000)
        ids = outcome.msg_id.split(",") if outcome.msg_id else [""] * len(sizes)
        for msg_id, routing_key, size in zip(ids, routing_keys, sizes, strict=False):
            self._add(
                PubRecord(
                    timestamp=now, region_id=REGION, group=producer_group(queue.vhost), topic=queue.topic,
                    msg_id=msg_id, tags=routing_key, keys="", store_host=outcome.broker_name,
                    body_length=size, cost_time=0, msg_type=MessageType.NORMAL, offset_msg_id=msg_id,
                    success=outcome.stored,
                )
            )  # fmt: skip

    def settled(self, queue: Queue, message: MessageExt, delivered: float, success: bool) -> None:
        """SubBefore and SubAfter of one delivery, once the consumer acknowledged or rejected it."""
        request = secrets.token_hex(8)
        keys = message.properties.get(Prop.KEYS, "")
        held_ms = int((time.monotonic() - delivered) * 1000)
        before = int(time.time() * 1000) - held_ms
        self._add(
            SubBeforeRecord(
                timestamp=before, region_id=REGION, group=queue.group, request_id=request,
                msg_id=message.msg_id, retry_times=message.reconsume_times, keys=keys,
            )
        )  # fmt: skip
        self._add(
            SubAfterRecord(
                request_id=request, msg_id=message.msg_id, cost_time=held_ms,
                success=success, keys=keys, timestamp=int(time.time() * 1000), group=queue.group,
            )
        )  # fmt: skip

    def _add(self, record: TraceRecord) -> None:
        text = encode_record(record)
        if self._size + len(text) > MAX_TRACE_BODY:
            self._send_now()
        self._pending.append(text)
        self._size += len(text)
        self._keys.update(dict.fromkeys(k for k in record_keys(record) if k))
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(FLUSH_AFTER_S, self._send_now)

    def _send_now(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if not self._pending:
            return
        body = "".join(self._pending).encode()
        keys = KEY_SEPARATOR.join(self._keys)
        self._pending, self._keys, self._size = [], {}, 0
        self.gateway.tasks.spawn(self._send(body, keys), "write message trace")

    async def _send(self, body: bytes, keys: str) -> None:
        try:
            await self.gateway.service.send(TRACE_TOPIC, body, encode_properties({Prop.KEYS: keys}))
        except Exception as e:  # a lost trace never fails messaging
            log.warning("writing message trace: %s", e)
