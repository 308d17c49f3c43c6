"""ReceiveMessage, AckMessage and ChangeInvisibleDuration over the message service's pop calls.

A receive answers as RocketMQ's proxy does: first a status, then one frame per message (with its
receipt handle, the broker's self-describing POP_CK checkpoint, so any proxy can settle it), then the
server's delivery time. Long polling is clamped to [5 s, 20 s] and to what is left of the call's
deadline, and a message's invisible time must be 10 s to 12 h unless the client asks the proxy to
renew it (renewal.py), which then maps the client's handle to the current one when it settles.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

from ferrymq.messaging.api import MessageQueue, MessageService, MessagingError
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.message_ext import CompressedBodyError, decode_records, decompress_body
from ferrymq.protocol.pop import INIT_MODE_MAX, POP_CK
from ferrymq.proxy.messages import set_millis, to_message
from ferrymq.proxy.producer import overall
from ferrymq.proxy.renewal import Renewals
from ferrymq.proxy.status import OK, from_response_code, status
from ferrymq.proxy.v2 import messaging_pb2 as pb

log = logging.getLogger(__name__)

MIN_POLL_MS, MAX_POLL_MS = 5_000, 20_000
DEADLINE_RESERVE_MS = 500  # kept back from the deadline so the answer still reaches the client
MIN_INVISIBLE_MS, MAX_INVISIBLE_MS = 10_000, 12 * 3600 * 1000
MAX_BATCH = 32
EXPRESSION_TYPES = {pb.FILTER_TYPE_UNSPECIFIED: "TAG", pb.TAG: "TAG", pb.SQL: "SQL92"}
# what the pop services answer for a handle that is malformed or no longer current
_STALE_HANDLE = frozenset((ResponseCode.INVALID_PARAMETER, ResponseCode.NO_MESSAGE))


def polling_ms(requested_ms: int | None, remaining_s: float | None) -> int | None:
    """How long an empty receive waits: the request's (or 20 s) clamped to [5 s, 20 s], cut to the
    call's deadline; None if the deadline leaves less than the minimum (ILLEGAL_POLLING_TIME)."""
    poll = min(max(MAX_POLL_MS if requested_ms is None else requested_ms, MIN_POLL_MS), MAX_POLL_MS)
    if remaining_s is None:
        return poll
    budget = int(remaining_s * 1000) - DEADLINE_RESERVE_MS
    if budget >= poll:
        return poll
    return budget if budget >= MIN_POLL_MS else None


def _invisible_ms(request: pb.ReceiveMessageRequest, renewals: Renewals) -> int | None:
    if request.auto_renew:
        return renewals.invisible_ms
    if not request.HasField("invisible_duration"):
        return None
    millis = request.invisible_duration.ToMilliseconds()
    return millis if MIN_INVISIBLE_MS <= millis <= MAX_INVISIBLE_MS else None


async def receive_message(
    service: MessageService, renewals: Renewals, request: pb.ReceiveMessageRequest, client_id: str,
    remaining_s: float | None,
) -> AsyncIterator[pb.ReceiveMessageResponse]:  # fmt: skip
    group, mq = request.group.name, request.message_queue
    topic = mq.topic.name
    failure = None
    invisible_ms = _invisible_ms(request, renewals)
    poll_ms = polling_ms(
        request.long_polling_timeout.ToMilliseconds() if request.HasField("long_polling_timeout") else None,
        remaining_s,
    )
    if not group:
        failure = status(pb.ILLEGAL_CONSUMER_GROUP, "consumer group is blank")
    elif not topic:
        failure = status(pb.ILLEGAL_TOPIC, "topic is blank")
    elif not 0 < request.batch_size <= MAX_BATCH:
        failure = status(pb.BAD_REQUEST, f"batch size must be 1 to {MAX_BATCH}, not {request.batch_size}")
    elif invisible_ms is None:
        failure = status(
            pb.ILLEGAL_INVISIBLE_TIME,
            f"invisible duration must be {MIN_INVISIBLE_MS} ms to {MAX_INVISIBLE_MS} ms",
        )
    elif poll_ms is None:
        failure = status(pb.ILLEGAL_POLLING_TIME, "the call's deadline leaves too little time to poll")
    else:
        failure = expression_problem(request.filter_expression)
    if failure is not None:
        yield pb.ReceiveMessageResponse(status=failure)
        return
    assert invisible_ms is not None and poll_ms is not None
    expression = request.filter_expression
    queue = MessageQueue(topic=topic, broker_name=mq.broker.name, queue_id=-1) if mq.broker.name else None
    try:
        outcome = await service.pop(
            group, topic, request.batch_size, invisible_ms, queue=queue,
            expression=expression.expression or "*",
            expression_type=EXPRESSION_TYPES.get(expression.type, "TAG"),
            poll_ms=poll_ms, init_mode=INIT_MODE_MAX,
        )  # fmt: skip
    except MessagingError as e:
        yield pb.ReceiveMessageResponse(status=from_response_code(e.code, str(e)))
        return
    if outcome.code != ResponseCode.SUCCESS:
        yield pb.ReceiveMessageResponse(
            status=from_response_code(outcome.code, outcome.remark or "no new message")
        )
        return
    tags = wanted_tags(expression)
    frames = []
    for record in decode_records(outcome.body):
        handle = record.properties.get(POP_CK)
        if tags is not None and record.tags not in tags:  # a tag hash collision: not ours, settle it
            await _settle_unwanted(service, group, topic, handle)
            continue
        try:
            decompress_body(record)
        except CompressedBodyError as e:  # left unacked: it comes back, then goes to the DLQ
            log.warning("%s: not handed out", e)
            continue
        frame = pb.ReceiveMessageResponse()
        to_message(record, handle, frame.message)
        set_millis(frame.message.system_properties.invisible_duration, invisible_ms)
        frames.append(frame)
        if request.auto_renew and handle is not None:
            renewals.track(client_id, group, topic, handle)
    yield pb.ReceiveMessageResponse(status=OK)
    for frame in frames:
        yield frame
    now = pb.ReceiveMessageResponse()
    now.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
    yield now


def expression_problem(expression: pb.FilterExpression) -> pb.Status | None:
    """Why a filter cannot be applied before asking a broker (a blank SQL92 expression), or None."""
    if expression.type == pb.SQL and not expression.expression.strip():
        return status(pb.ILLEGAL_FILTER_EXPRESSION, "an SQL92 filter needs an expression")
    return None


def wanted_tags(expression: pb.FilterExpression) -> frozenset[str] | None:
    """The tags a TAG filter takes, None for all (or for SQL92, which the broker applies in full):
    the broker filters by tag hash code only, as RocketMQ's consume queue keeps no more."""
    if expression.type == pb.SQL:
        return None
    tags = frozenset(t.strip() for t in expression.expression.split("||")) - {""}
    return None if not tags or "*" in tags else tags


async def _settle_unwanted(service: MessageService, group: str, topic: str, handle: str | None) -> None:
    if handle is None:
        return
    try:
        await service.ack(group, topic, handle)
    except MessagingError as e:  # it comes back after its invisible time and is settled then
        log.warning("message of %s filtered out for %s not settled: %s", topic, group, e)


def _settle_status(error: MessagingError) -> pb.Status:
    if error.code in _STALE_HANDLE:
        return status(pb.INVALID_RECEIPT_HANDLE, str(error))
    return from_response_code(error.code, str(error))


async def ack_message(
    service: MessageService, renewals: Renewals, request: pb.AckMessageRequest
) -> pb.AckMessageResponse:
    group, topic = request.group.name, request.topic.name
    if not group or not topic:
        code = pb.ILLEGAL_CONSUMER_GROUP if not group else pb.ILLEGAL_TOPIC
        return pb.AckMessageResponse(status=status(code, "consumer group and topic must not be blank"))
    if not request.entries:
        return pb.AckMessageResponse(status=status(pb.BAD_REQUEST, "no entry to ack"))
    handles = [await renewals.settle(entry.receipt_handle) for entry in request.entries]
    errors = await service.ack_batch(group, topic, handles)  # one ack record per pop, not per message
    entries = []
    for entry, error in zip(request.entries, errors, strict=True):
        result = pb.AckMessageResultEntry(message_id=entry.message_id, receipt_handle=entry.receipt_handle)
        result.status.CopyFrom(OK if error is None else _settle_status(error))
        entries.append(result)
    return pb.AckMessageResponse(status=overall(entries), entries=entries)


async def change_invisible_duration(
    service: MessageService, renewals: Renewals, request: pb.ChangeInvisibleDurationRequest
) -> pb.ChangeInvisibleDurationResponse:
    group, topic = request.group.name, request.topic.name
    millis = request.invisible_duration.ToMilliseconds()
    if not group or not topic:
        code = pb.ILLEGAL_CONSUMER_GROUP if not group else pb.ILLEGAL_TOPIC
        return pb.ChangeInvisibleDurationResponse(
            status=status(code, "consumer group and topic must not be blank")
        )
    if not 0 <= millis <= MAX_INVISIBLE_MS:
        return pb.ChangeInvisibleDurationResponse(
            status=status(pb.ILLEGAL_INVISIBLE_TIME, f"invisible duration must be 0 to {MAX_INVISIBLE_MS} ms")
        )
    try:
        current = await renewals.settle(request.receipt_handle)  # the client's time now, not ours
        handle = await service.change_invisible_time(group, topic, current, millis)
    except MessagingError as e:
        return pb.ChangeInvisibleDurationResponse(status=_settle_status(e))
    return pb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)


async def forward_to_dead_letter_queue(
    service: MessageService, renewals: Renewals, request: pb.ForwardMessageToDeadLetterQueueRequest
) -> pb.ForwardMessageToDeadLetterQueueResponse:
    """A consumer gave up on a message (a FIFO consumer after its local retries): to the DLQ, settled."""
    group, topic = request.group.name, request.topic.name
    if not group or not topic:
        code = pb.ILLEGAL_CONSUMER_GROUP if not group else pb.ILLEGAL_TOPIC
        return pb.ForwardMessageToDeadLetterQueueResponse(
            status=status(code, "consumer group and topic must not be blank")
        )
    try:
        await service.dead_letter(group, topic, await renewals.settle(request.receipt_handle))
    except MessagingError as e:
        return pb.ForwardMessageToDeadLetterQueueResponse(status=_settle_status(e))
    return pb.ForwardMessageToDeadLetterQueueResponse(status=OK)
