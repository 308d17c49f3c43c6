"""SendMessage: v2 messages stored through the message service. The proxy chooses the queue of a
message group (a hash of the group over the topic's writable queues), so one group keeps one queue
whichever client, in whichever language, sends it; other messages go where the service chooses.
The plain messages of a request (no group, delivery time or transaction) are stored as one batch,
in one queue, as the SDK's batches are: one put instead of one per message."""

from __future__ import annotations

from collections.abc import Sequence

from ferrymq.messaging.api import MessageQueue, MessageService, MessagingError, QueueData
from ferrymq.protocol.batch import encode_batch
from ferrymq.protocol.sys_flag import TRANSACTION_PREPARED_TYPE
from ferrymq.protocol.topic_names import topic_problem
from ferrymq.proxy.message_types import refusal, topic_type
from ferrymq.proxy.messages import IllegalMessage, queue_for_group, to_stored
from ferrymq.proxy.routes import PERM_WRITE
from ferrymq.proxy.status import from_response_code, status
from ferrymq.proxy.transactions import transaction_id
from ferrymq.proxy.v2 import messaging_pb2 as pb

Stored = tuple[pb.Message, pb.SendResultEntry, bytes, str]  # a message, its entry, body, properties


def writable_queues(topic: str, datas: list[QueueData]) -> list[MessageQueue]:
    """The topic's writable queues in a stable order (brokers by name, then queue id)."""
    return [
        MessageQueue(topic=topic, broker_name=d.broker_name, queue_id=i)
        for d in sorted(datas, key=lambda d: d.broker_name)
        if d.perm & PERM_WRITE
        for i in range(d.write_queue_nums)
    ]


def overall(entries: Sequence[pb.SendResultEntry] | Sequence[pb.AckMessageResultEntry]) -> pb.Status:
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
    response = pb.SendMessageResponse()
    plain: list[Stored] = []
    for message in request.messages:
        entry = response.entries.add()
        entry.message_id = message.system_properties.message_id
        checked = _checked(service, topic, kind, message, entry)
        if checked is None:
            continue
        if _plain(message.system_properties):
            plain.append((message, entry, *checked))
        else:
            await _send_one(service, topic, datas, message, entry, *checked)
    if len(plain) == 1:
        await _send_one(service, topic, datas, *plain[0])
    elif plain:
        await _send_batch(service, topic, plain)
    response.status.CopyFrom(overall(response.entries))
    return response


def _plain(sp: pb.SystemProperties) -> bool:
    """Whether a message can share a batch: RocketMQ's batches take no group, delay or transaction."""
    return not (
        sp.HasField("message_group") or sp.HasField("delivery_timestamp") or sp.message_type == pb.TRANSACTION
    )


def _checked(
    service: MessageService, topic: str, kind: str, message: pb.Message, entry: pb.SendResultEntry
) -> tuple[bytes, str] | None:
    """(body, properties) to store `message` with, or None with the entry's status saying why not.
    `kind`: the topic's message type."""
    try:
        body, properties = to_stored(message)
    except IllegalMessage as e:
        entry.status.CopyFrom(status(e.code, str(e)))
        return None
    refused = refusal(topic, kind, message.system_properties)
    if refused is not None:
        entry.status.CopyFrom(refused)
        return None
    if not body:
        entry.status.CopyFrom(status(pb.MESSAGE_BODY_EMPTY, "message body is empty"))
        return None
    if len(body) > service.max_body_size:
        entry.status.CopyFrom(
            status(
                pb.MESSAGE_BODY_TOO_LARGE,
                f"message body of {len(body)} bytes exceeds {service.max_body_size}",
            )
        )
        return None
    return body, properties


async def _send_batch(service: MessageService, topic: str, plain: list[Stored]) -> None:
    """One put for all: each entry gets the outcome, and its own offset when stored."""
    batch = encode_batch([(body, properties.encode(), 0) for _, _, body, properties in plain])
    born = plain[0][0].system_properties.born_timestamp.ToMilliseconds()
    try:
        outcome = await service.send_batch(topic, batch, born_timestamp=born, producer_group=topic)
    except MessagingError as e:
        for _, entry, _, _ in plain:
            entry.status.CopyFrom(from_response_code(e.code, str(e)))
        return
    result = from_response_code(outcome.code, outcome.remark)
    code, remark, offset = result.code, result.message, outcome.queue_offset if outcome.stored else None
    for i, (_, entry, _, _) in enumerate(plain):
        entry.status.code = code
        entry.status.message = remark
        if offset is not None:
            entry.offset = offset + i


async def _send_one(
    service: MessageService, topic: str, datas: list[QueueData], message: pb.Message,
    entry: pb.SendResultEntry, body: bytes, properties: str,
) -> None:  # fmt: skip
    sp = message.system_properties
    half = sp.message_type == pb.TRANSACTION
    queue = None
    if sp.HasField("message_group"):
        queues = writable_queues(topic, datas)
        if not queues:
            entry.status.CopyFrom(status(pb.FORBIDDEN, f"topic {topic} has no writable queue"))
            return
        queue = queues[queue_for_group(sp.message_group, len(queues))]
    try:
        outcome = await service.send(
            topic, body, properties, queue=queue, born_timestamp=sp.born_timestamp.ToMilliseconds(),
            producer_group=topic, sys_flag=TRANSACTION_PREPARED_TYPE if half else 0,
        )  # fmt: skip
    except MessagingError as e:
        entry.status.CopyFrom(from_response_code(e.code, str(e)))
        return
    # stored but not as durable as asked answers *_PERSISTENCE_TIMEOUT, as RocketMQ's proxy does
    entry.status.CopyFrom(from_response_code(outcome.code, outcome.remark))
    if outcome.stored:
        entry.offset = outcome.queue_offset
        entry.recall_handle = outcome.recall_handle or ""
        if half:
            entry.transaction_id = transaction_id(outcome)
