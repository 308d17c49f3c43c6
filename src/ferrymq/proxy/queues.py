"""The queue a pull or offset call names: its topic must exist and its broker serve the queue id,
so a client hears TOPIC_NOT_FOUND or BAD_REQUEST from the proxy, not a broker's remark."""

from __future__ import annotations

from ferrymq.messaging.api import MessageQueue, MessageService
from ferrymq.proxy.routes import topic_route
from ferrymq.proxy.status import status
from ferrymq.proxy.v2 import messaging_pb2 as pb


def blank_group(group: pb.Resource) -> pb.Status | None:
    return status(pb.ILLEGAL_CONSUMER_GROUP, "consumer group is blank") if not group.name else None


async def resolve(service: MessageService, queue: pb.MessageQueue) -> MessageQueue | pb.Status:
    """The message service's queue for a request's `queue`, or the status refusing it."""
    datas, result = await topic_route(service, queue.topic.name)
    if datas is None:
        return result
    broker = queue.broker.name
    data = next((d for d in datas if d.broker_name == broker), None)
    if data is None:
        return status(pb.BAD_REQUEST, f"no broker {broker!r} serves topic {queue.topic.name}")
    if not 0 <= queue.id < max(data.read_queue_nums, data.write_queue_nums):
        return status(pb.BAD_REQUEST, f"topic {queue.topic.name} has no queue {queue.id} on {broker}")
    return MessageQueue(topic=queue.topic.name, broker_name=broker, queue_id=queue.id)
