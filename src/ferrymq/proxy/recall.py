"""RecallMessage: cancel a delayed message before it is delivered, by the recall handle its send
answered (SendResultEntry.recall_handle). The broker that holds it decides (broker/schedule/recall);
the proxy checks, as RocketMQ's does, that the topic takes delayed messages. Codes follow RocketMQ's
proxy: a handle the broker refuses (malformed, of another topic, due already) is INTERNAL_SERVER_ERROR
with the broker's reason."""

from __future__ import annotations

from ferrymq.messaging.api import MessageService, MessagingError
from ferrymq.protocol.topic_attributes import DELAY, accepts
from ferrymq.proxy.message_types import topic_type
from ferrymq.proxy.status import OK, from_response_code, status
from ferrymq.proxy.v2 import messaging_pb2 as pb


async def recall_message(
    service: MessageService, request: pb.RecallMessageRequest
) -> pb.RecallMessageResponse:
    topic = request.topic.name
    if not topic:
        return pb.RecallMessageResponse(status=status(pb.ILLEGAL_TOPIC, "topic is blank"))
    try:
        config = await service.topic_config(topic)
        if config is None:
            return pb.RecallMessageResponse(
                status=status(pb.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
            )
        kind = topic_type(config)
        if not accepts(kind, DELAY):
            return pb.RecallMessageResponse(
                status=status(
                    pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    f"topic {topic} takes {kind} messages, not DELAY ones",
                )
            )
        message_id = await service.recall(topic, request.recall_handle, producer_group=topic)
    except MessagingError as e:
        return pb.RecallMessageResponse(status=from_response_code(e.code, str(e)))
    return pb.RecallMessageResponse(status=OK, message_id=message_id)
