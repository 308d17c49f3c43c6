"""SendMessage: each v2 message stored through the message service. The proxy chooses the queue of a
message group (a hash of the group over the topic's writable queues), so one group keeps one queue
whichever client, in whichever language, sends it; other messages go where the service chooses."""

from __future__ import annotations

from ferrymq.messaging.api import MessageQueue, MessageService, MessagingError, QueueData
from ferrymq.protocol.sys_flag import TRANSACTION_PREPARED_TYPE
from ferrymq.protocol.topic_names import topic_problem
from ferrymq.proxy.message_types import refusal, topic_type
from ferrymq.proxy.messages import IllegalMessage, queue_for_group, to_stored
from ferrymq.proxy.routes import PERM_WRITE
from ferrymq.proxy.status import from_response_code, status
from ferrymq.proxy.transactions import transaction_id
from ferrymq.proxy.v2 import messaging_pb2 as pb


def writable_queues(topic: str, datas: list[QueueData]) -> list[MessageQueue]:
    """The topic's writable queues in a stable order (brokers by name, then queue id)."""
    return [
        MessageQueue(topic=topic, broker_name=d.broker_name, queue_id=i)
        for d in sorted(datas, key=lambda d: d.broker_name)
        if d.perm & PERM_WRITE
        for i in range(d.write_queue_nums)
    ]


def overall(entries: list[pb.SendResultEntry] | list[pb.AckMessageResultEntry]) -> pb.Status:
    """The status of a call with one result per entry: theirs if they agree, else MULTIPLE_RESULTS."""
    codes = {e.status.code for e in entries}
    if len(codes) == 1:
        return entries[0].status
    return status(pb.MULTIPLE_RESULTS, "entries have different results")


async def send_message(service: MessageService, request: pb.SendMessageRequest) -> pb.SendMessageResponse:
    if not request.messages:  # both MESSAGE_CORRUPTED, as RocketMQ's proxy answers
        return pb.SendMessageResponse(status=status(pb.MESSAGE_CORRUPTED, "no message to send"))
    topic = request.messages[0].topic.name
    if any(m.topic.name != topic for m in request.messages):
        return pb.SendMessageResponse(
            status=status(pb.MESSAGE_CORRUPTED, "messages of one request share a topic")
        )
    problem = topic_problem(topic)
    if problem:
        return pb.SendMessageResponse(status=status(pb.ILLEGAL_TOPIC, problem))
    try:
        datas = await service.route(topic)
        kind = topic_type(await service.topic_config(topic)) if datas is not None else ""
    except MessagingError as e:
        return pb.SendMessageResponse(status=status(pb.INTERNAL_SERVER_ERROR, f"route of {topic}: {e}"))
    if datas is None:
        return pb.SendMessageResponse(status=status(pb.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist"))
    entries = [await _send_one(service, topic, kind, datas, m) for m in request.messages]
    return pb.SendMessageResponse(status=overall(entries), entries=entries)


async def _send_one(
    service: MessageService, topic: str, kind: str, datas: list[QueueData], message: pb.Message
) -> pb.SendResultEntry:
    """`kind`: the topic's message type."""
    sp = message.system_properties
    entry = pb.SendResultEntry(message_id=sp.message_id)
    try:
        body, properties = to_stored(message)
    except IllegalMessage as e:
        entry.status.CopyFrom(status(e.code, str(e)))
        return entry
    refused = refusal(topic, kind, properties)
    if refused is not None:
        entry.status.CopyFrom(refused)
        return entry
    if not body:
        entry.status.CopyFrom(status(pb.MESSAGE_BODY_EMPTY, "message body is empty"))
        return entry
    if len(body) > service.max_body_size:
        entry.status.CopyFrom(
            status(
                pb.MESSAGE_BODY_TOO_LARGE,
                f"message body of {len(body)} bytes exceeds {service.max_body_size}",
            )
        )
        return entry
    half = sp.message_type == pb.TRANSACTION
    queue = None
    if sp.HasField("message_group"):
        queues = writable_queues(topic, datas)
        if not queues:
            entry.status.CopyFrom(status(pb.FORBIDDEN, f"topic {topic} has no writable queue"))
            return entry
        queue = queues[queue_for_group(sp.message_group, len(queues))]
    try:
        outcome = await service.send(
            topic, body, properties, queue=queue, born_timestamp=sp.born_timestamp.ToMilliseconds(),
            producer_group=topic, sys_flag=TRANSACTION_PREPARED_TYPE if half else 0,
        )  # fmt: skip
    except MessagingError as e:
        entry.status.CopyFrom(from_response_code(e.code, str(e)))
        return entry
    # stored but not as durable as asked answers *_PERSISTENCE_TIMEOUT, as RocketMQ's proxy does
    entry.status.CopyFrom(from_response_code(outcome.code, outcome.remark))
    if outcome.stored:
        entry.offset = outcome.queue_offset
        entry.recall_handle = outcome.recall_handle or ""
        if half:
            entry.transaction_id = transaction_id(outcome)
    return entry
