"""UpdateOffset, GetOffset and QueryOffset: a pull consumer's committed offsets and a queue's
positions (first message, end, first message stored at a time), over the message service."""

from __future__ import annotations

from ferrymq.messaging.api import MessageService, MessagingError
from ferrymq.proxy.queues import blank_group, resolve
from ferrymq.proxy.status import OK, from_response_code, status
from ferrymq.proxy.v2 import messaging_pb2 as pb


async def update_offset(service: MessageService, request: pb.UpdateOffsetRequest) -> pb.UpdateOffsetResponse:
    refused = blank_group(request.group)
    queue = refused or await resolve(service, request.message_queue)
    if isinstance(queue, pb.Status):
        return pb.UpdateOffsetResponse(status=queue)
    try:
        low, high = await service.queue_bounds(queue)
        if not low <= request.offset <= high:
            return pb.UpdateOffsetResponse(
                status=status(pb.ILLEGAL_OFFSET, f"offset {request.offset} is outside [{low}, {high}]")
            )
        await service.commit_offset(request.group.name, queue, request.offset)
    except MessagingError as e:
        return pb.UpdateOffsetResponse(status=from_response_code(e.code, str(e)))
    return pb.UpdateOffsetResponse(status=OK)


async def get_offset(service: MessageService, request: pb.GetOffsetRequest) -> pb.GetOffsetResponse:
    refused = blank_group(request.group)
    queue = refused or await resolve(service, request.message_queue)
    if isinstance(queue, pb.Status):
        return pb.GetOffsetResponse(status=queue)
    try:
        offset = await service.query_offset(request.group.name, queue)
    except MessagingError as e:
        return pb.GetOffsetResponse(status=from_response_code(e.code, str(e)))
    if offset is None:
        return pb.GetOffsetResponse(
            status=status(pb.OFFSET_NOT_FOUND, f"group {request.group.name} has no offset for this queue")
        )
    return pb.GetOffsetResponse(status=OK, offset=offset)


async def query_offset(service: MessageService, request: pb.QueryOffsetRequest) -> pb.QueryOffsetResponse:
    """BEGINNING: the queue's first stored message; END: one past its last; TIMESTAMP: the first
    stored at or after the request's timestamp."""
    policy = request.query_offset_policy
    if policy == pb.TIMESTAMP and not request.HasField("timestamp"):
        return pb.QueryOffsetResponse(status=status(pb.BAD_REQUEST, "policy TIMESTAMP needs a timestamp"))
    if policy not in (pb.BEGINNING, pb.END, pb.TIMESTAMP):
        return pb.QueryOffsetResponse(status=status(pb.BAD_REQUEST, f"unknown query offset policy {policy}"))
    queue = await resolve(service, request.message_queue)
    if isinstance(queue, pb.Status):
        return pb.QueryOffsetResponse(status=queue)
    try:
        if policy == pb.TIMESTAMP:
            offset = await service.search_offset(queue, request.timestamp.ToMilliseconds())
        else:
            offset = (await service.queue_bounds(queue))[policy == pb.END]
    except MessagingError as e:
        return pb.QueryOffsetResponse(status=from_response_code(e.code, str(e)))
    return pb.QueryOffsetResponse(status=OK, offset=offset)
