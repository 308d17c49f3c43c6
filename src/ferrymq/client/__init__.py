"""The Python SDK: producers, consumers and admin, asyncio first with a synchronous facade."""

from ferrymq.client.admin import Admin, QueueProgress
from ferrymq.client.admin_stats import AdminRefused, ConsumeStats
from ferrymq.client.instance import ClientError, ClientInstance, TLSOption
from ferrymq.client.message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from ferrymq.client.producer import Producer, SendError, hash_selector
from ferrymq.client.pull import PullResult, PullStatus
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.client.push_consumer import ConsumeResult, PushConsumer
from ferrymq.client.selector import MessageSelector
from ferrymq.client.simple_consumer import ReceivedMessage, SimpleConsumer
from ferrymq.client.transaction import LocalTransactionState, TransactionProducer, TransactionSendResult
from ferrymq.net.tls import ClientTLS

__all__ = [
    "Admin",
    "AdminRefused",
    "ClientError",
    "ClientInstance",
    "ClientTLS",
    "ConsumeResult",
    "ConsumeStats",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "QueueProgress",
    "ReceivedMessage",
    "SendError",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "TLSOption",
    "TransactionProducer",
    "TransactionSendResult",
    "hash_selector",
]
