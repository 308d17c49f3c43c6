"""PullMessage: a pull consumer reads a queue by offset (it keeps its own position, or commits it
with UpdateOffset). The answer streams a status, the messages, then the offset to pull from next.
An empty pull waits for a message up to the request's long polling time (at most 20 s, and never
past the call's deadline)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from ferrymq.messaging.api import MessageService, MessagingError
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.message_ext import CompressedBodyError, decode_records, decompress_body
from ferrymq.proxy.consumer import (
    DEADLINE_RESERVE_MS,
    EXPRESSION_TYPES,
    MAX_BATCH,
    MAX_POLL_MS,
    expression_problem,
    wanted_tags,
)
from ferrymq.proxy.messages import to_message
from ferrymq.proxy.queues import blank_group, resolve
from ferrymq.proxy.status import OK, from_response_code, status
from ferrymq.proxy.v2 import messaging_pb2 as pb

log = logging.getLogger(__name__)

# what a read answers, as the status of a pull (each still tells where to pull next)
_STATUSES: dict[int, pb.Status] = {
    ResponseCode.SUCCESS: OK,
    ResponseCode.PULL_RETRY_IMMEDIATELY: OK,  # messages there, none matching the filter
    ResponseCode.PULL_NOT_FOUND: status(pb.MESSAGE_NOT_FOUND, "no new message"),
    ResponseCode.PULL_OFFSET_MOVED: status(
        pb.ILLEGAL_OFFSET, "offset is outside the queue: pull from next_offset"
    ),
}


def long_polling_ms(request: pb.PullMessageRequest, remaining_s: float | None) -> int:
    """How long an empty pull waits: what the request asks (none if it asks nothing), at most
    20 s, cut to the call's deadline."""
    if not request.HasField("long_polling_timeout"):
        return 0
    wait = min(max(request.long_polling_timeout.ToMilliseconds(), 0), MAX_POLL_MS)
    if remaining_s is not None:
        wait = min(wait, int(remaining_s * 1000) - DEADLINE_RESERVE_MS)
    return max(wait, 0)


async def pull_message(
    service: MessageService, request: pb.PullMessageRequest, remaining_s: float | None
) -> AsyncIterator[pb.PullMessageResponse]:
    refused = blank_group(request.group)
    if refused is None and not 0 < request.batch_size <= MAX_BATCH:
        refused = status(pb.BAD_REQUEST, f"batch size must be 1 to {MAX_BATCH}, not {request.batch_size}")
    if refused is None and request.offset < 0:
        refused = status(pb.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
    if refused is None:
        refused = expression_problem(request.filter_expression)
    queue = refused or await resolve(service, request.message_queue)
    if isinstance(queue, pb.Status):
        yield pb.PullMessageResponse(status=queue)
        return
    expression = request.filter_expression
    try:
        outcome = await service.read(
            request.group.name, queue, request.offset, request.batch_size,
            expression=expression.expression or "*",
            expression_type=EXPRESSION_TYPES.get(expression.type, "TAG"),
            suspend_ms=long_polling_ms(request, remaining_s),
        )  # fmt: skip
    except MessagingError as e:
        yield pb.PullMessageResponse(status=from_response_code(e.code, str(e)))
        return
    answer = _STATUSES.get(outcome.code)
    if answer is None:
        yield pb.PullMessageResponse(status=from_response_code(outcome.code, outcome.remark))
        return
    yield pb.PullMessageResponse(status=answer)
    if outcome.code == ResponseCode.SUCCESS:
        tags = wanted_tags(expression)
        for record in decode_records(outcome.body()):
            if tags is not None and record.tags not in tags:  # a tag hash collision: not asked for
                continue
            try:
                decompress_body(record)
            except CompressedBodyError as e:
                log.warning("%s: skipped", e)
                continue
            yield pb.PullMessageResponse(message=to_message(record))
    yield pb.PullMessageResponse(next_offset=outcome.next_begin_offset)
