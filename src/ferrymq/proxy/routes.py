"""QueryRoute and QueryAssignment: a topic's queues as v2 `MessageQueue`s. Every queue names this
proxy as its broker's endpoint (the address the client reached us at), so the client sends all its
calls here and the proxy forwards them to the broker that holds the queue."""

from __future__ import annotations

from ferrymq.messaging.api import MessageService, MessagingError, QueueData
from ferrymq.protocol.topic_names import topic_problem
from ferrymq.proxy.message_types import accepted, topic_type
from ferrymq.proxy.status import OK, status
from ferrymq.proxy.v2 import messaging_pb2 as pb

PERM_WRITE, PERM_READ = 2, 4  # RocketMQ's PermName bits


def permission(queue_id: int, data: QueueData) -> int:
    """The v2 permission of one queue: readable if it is one of the read queues of a readable topic,
    writable likewise."""
    readable = queue_id < data.read_queue_nums and bool(data.perm & PERM_READ)
    writable = queue_id < data.write_queue_nums and bool(data.perm & PERM_WRITE)
    if readable and writable:
        return pb.READ_WRITE
    return pb.READ if readable else pb.WRITE if writable else pb.NONE


def message_queues(
    topic: pb.Resource, datas: list[QueueData], endpoints: pb.Endpoints, types: list[pb.MessageType]
) -> list[pb.MessageQueue]:
    """`types`: the message types the topic accepts."""
    out = []
    for data in datas:
        broker = pb.Broker(name=data.broker_name, id=0, endpoints=endpoints)
        for queue_id in range(max(data.read_queue_nums, data.write_queue_nums)):
            out.append(
                pb.MessageQueue(
                    topic=topic, id=queue_id, permission=permission(queue_id, data),  # type: ignore[arg-type]
                    broker=broker, accept_message_types=types,
                )
            )  # fmt: skip
    return out


async def topic_route(service: MessageService, topic: str) -> tuple[list[QueueData] | None, pb.Status]:
    problem = topic_problem(topic)
    if problem:
        return None, status(pb.ILLEGAL_TOPIC, problem)
    try:
        datas = await service.route(topic)
    except MessagingError as e:
        return None, status(pb.INTERNAL_SERVER_ERROR, f"route of {topic}: {e}")
    if datas is None:
        return None, status(pb.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
    return datas, OK


async def accepted_types(service: MessageService, topic: str) -> list[pb.MessageType] | pb.Status:
    """The message types `topic` accepts, from its message.type attribute."""
    try:
        return accepted(topic_type(await service.topic_config(topic)))
    except MessagingError as e:
        return status(pb.INTERNAL_SERVER_ERROR, f"config of topic {topic}: {e}")


async def query_route(
    service: MessageService, request: pb.QueryRouteRequest, endpoints: pb.Endpoints
) -> pb.QueryRouteResponse:
    datas, result = await topic_route(service, request.topic.name)
    if datas is None:
        return pb.QueryRouteResponse(status=result)
    types = await accepted_types(service, request.topic.name)
    if isinstance(types, pb.Status):
        return pb.QueryRouteResponse(status=types)
    if request.endpoints.addresses:
        endpoints = request.endpoints
    return pb.QueryRouteResponse(
        status=OK, message_queues=message_queues(request.topic, datas, endpoints, types)
    )


async def query_assignment(
    service: MessageService, request: pb.QueryAssignmentRequest, endpoints: pb.Endpoints
) -> pb.QueryAssignmentResponse:
    """One assignment per broker with readable queues, queue id -1: its pops take any queue."""
    datas, result = await topic_route(service, request.topic.name)
    if datas is None:
        return pb.QueryAssignmentResponse(status=result)
    types = await accepted_types(service, request.topic.name)
    if isinstance(types, pb.Status):
        return pb.QueryAssignmentResponse(status=types)
    if request.endpoints.addresses:
        endpoints = request.endpoints
    assignments = [
        pb.Assignment(
            message_queue=pb.MessageQueue(
                topic=request.topic, id=-1, permission=pb.READ_WRITE,
                broker=pb.Broker(name=d.broker_name, id=0, endpoints=endpoints),
                accept_message_types=types,
            )
        )
        for d in datas
        if d.read_queue_nums > 0 and d.perm & PERM_READ
    ]  # fmt: skip
    if not assignments:
        return pb.QueryAssignmentResponse(
            status=status(pb.FORBIDDEN, f"topic {request.topic.name} is not readable")
        )
    return pb.QueryAssignmentResponse(status=OK, assignments=assignments)
