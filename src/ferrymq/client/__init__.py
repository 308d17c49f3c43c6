"""The Python SDK: producers, consumers and admin, asyncio first with a synchronous facade."""

from ferrymq.client.instance import ClientError, ClientInstance
from ferrymq.client.message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from ferrymq.client.producer import Producer, SendError, hash_selector

__all__ = [
    "ClientError",
    "ClientInstance",
    "Message",
    "MessageExt",
    "MessageQueue",
    "Producer",
    "SendError",
    "SendResult",
    "SendStatus",
    "hash_selector",
]
