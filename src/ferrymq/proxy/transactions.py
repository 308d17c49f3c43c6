"""EndTransaction for half messages sent through the proxy. The transaction id handed to the client
says where the half message is (broker, queue, queue offset, offset message id), so any proxy can end
it, after a restart too, with nothing kept in memory; the broker checks the producer group (the topic,
as RocketMQ's proxy sets it) and that a half message is there."""

from __future__ import annotations

from ferrymq.messaging.api import MessageService, MessagingError, SendOutcome
from ferrymq.proxy.status import OK, from_response_code, status
from ferrymq.proxy.v2 import messaging_pb2 as pb

_RESOLUTIONS = {pb.COMMIT: True, pb.ROLLBACK: False}


def transaction_id(sent: SendOutcome) -> str:
    return f"{sent.broker_name} {sent.queue_id} {sent.queue_offset} {sent.msg_id}"


def half_message(text: str) -> SendOutcome | None:
    """The stored half message a transaction id names, None if the text is not one."""
    parts = text.split(" ")
    if len(parts) != 4 or not parts[0] or not all(p.isdigit() for p in parts[1:3]) or len(parts[1]) > 9:
        return None
    broker, queue_id, queue_offset, msg_id = parts
    return SendOutcome(0, None, broker, int(queue_id), int(queue_offset), msg_id)


async def end_transaction(
    service: MessageService, request: pb.EndTransactionRequest
) -> pb.EndTransactionResponse:
    topic = request.topic.name
    sent = half_message(request.transaction_id)
    if sent is None:
        return pb.EndTransactionResponse(
            status=status(pb.INVALID_TRANSACTION_ID, f"not a transaction id: {request.transaction_id!r}")
        )
    commit = _RESOLUTIONS.get(request.resolution)
    if commit is None:  # the client does not know yet: the broker's check-back will ask again
        return pb.EndTransactionResponse(status=OK)
    try:
        await service.end_transaction(topic, sent, commit, topic=topic, transaction_id=request.message_id)
    except MessagingError as e:
        return pb.EndTransactionResponse(status=from_response_code(e.code, str(e)))
    return pb.EndTransactionResponse(status=OK)
