"""The interface every protocol front (gRPC proxy, AMQP gateway) uses to move messages, whether the
broker runs in the same process (`local.LocalMessageService`) or elsewhere in a cluster
(`remote.RemoteMessageService`) — RocketMQ 5 proxy's MessageService, in local and cluster mode.

Rule refusals come back as outcomes carrying RocketMQ's response code (NO_PERMISSION,
TOPIC_NOT_EXIST, MESSAGE_ILLEGAL, ...), the same from both implementations, since the broker's
services decide them; a broker that cannot be reached raises MessagingError.
"""

from __future__ import annotations

from typing import Protocol

from ferrymq.broker.services.outcomes import STORED_CODES, PopOutcome, ReadOutcome, SendOutcome
from ferrymq.protocol.bodies import MessageQueue, QueueData, SubscriptionGroupConfig
from ferrymq.protocol.pop import INIT_MODE_MAX

__all__ = [
    "STORED_CODES",
    "MessageQueue",
    "MessageService",
    "MessagingError",
    "PopOutcome",
    "QueueData",
    "ReadOutcome",
    "SendOutcome",
    "SubscriptionGroupConfig",
]


class MessagingError(Exception):
    """A call that got no answer from the rules: the broker or NameServer is unreachable, or refused
    a call that has no outcome object (offsets). `code` is the response code when there was one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class MessageService(Protocol):
    # --- producing ------------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        body: bytes | memoryview,
        properties: str = "",
        *,
        queue: MessageQueue | None = None,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: bytes | None = None,
        reconsume_times: int = 0,
        producer_group: str = "",
    ) -> SendOutcome:
        """Store one message: `properties` in RocketMQ's encoding (protocol.properties.encode_properties);
        `queue` None lets the service choose. `born_host` (packed) is the producer's address where the
        front knows it (local; a remote broker sees the service's own address)."""
        ...

    async def send_batch(
        self,
        topic: str,
        batch_body: bytes | memoryview,
        *,
        queue: MessageQueue | None = None,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: bytes | None = None,
        producer_group: str = "",
    ) -> SendOutcome:
        """Store messages encoded by protocol.batch.encode_batch, in one queue, in order; the
        outcome's msg_id lists their ids comma-separated."""
        ...

    async def end_transaction(
        self,
        producer_group: str,
        sent: SendOutcome,
        commit: bool,
        *,
        topic: str = "",
        transaction_id: str = "",
    ) -> None:
        """Commit or roll back the half message `sent` stored (a send with the TRANSACTION_PREPARED
        sys flag and TRAN_MSG/PGROUP properties). MessagingError if its broker refuses (no such half
        message, or ended already)."""
        ...

    # --- consuming by queue and offset --------------------------------------------------------

    async def read(
        self,
        group: str,
        queue: MessageQueue,
        offset: int,
        max_count: int = 32,
        *,
        expression: str = "*",
        expression_type: str = "TAG",
        suspend_ms: int = 0,
        commit_offset: int = -1,
    ) -> ReadOutcome:
        """Up to `max_count` messages of `queue` from `offset` that match the expression (TAG or
        SQL92); an empty read waits up to `suspend_ms` for one (long polling). `commit_offset` >= 0
        is committed for the group on the way. Records come back as stored (decode them with
        protocol.message_ext.decode_records)."""
        ...

    async def query_offset(self, group: str, queue: MessageQueue) -> int | None:
        """The group's committed offset (0 for a new group while the queue holds its first message),
        or None if it has none."""
        ...

    async def commit_offset(self, group: str, queue: MessageQueue, offset: int) -> None: ...

    async def consumer_group(self, group: str, topic: str) -> SubscriptionGroupConfig | None:
        """The group's config as the broker of `topic` keeps it (orderly, retries), None if it has
        none there yet (brokers create groups on first use)."""
        ...

    # --- routes -----------------------------------------------------------------------------------

    async def route(self, topic: str) -> list[QueueData] | None:
        """The topic's queues per broker (read/write queue counts, permission), None if it has none."""
        ...

    # --- pop-style consumption (RocketMQ 5's popMessage / ackMessage / changeInvisibleTime) -------

    async def pop(
        self,
        group: str,
        topic: str,
        max_count: int = 32,
        invisible_ms: int = 60_000,
        *,
        queue: MessageQueue | None = None,
        expression: str = "*",
        expression_type: str = "TAG",
        poll_ms: int = 0,
        fifo: bool = False,
        init_mode: int = INIT_MODE_MAX,
    ) -> PopOutcome:
        """Up to `max_count` (1..32) messages of `topic` for `group`, from `queue` or any queue, each
        invisible to the group for `invisible_ms` unless acked; an empty pop waits up to `poll_ms`.
        Each record carries its receipt handle in the POP_CK property. `fifo` (or the group's
        consume_message_orderly) hands out a queue's next message only once the previous is settled.
        A group new to a queue starts at its end (`init_mode` INIT_MODE_MAX, as RocketMQ's proxy) or
        at its first message (INIT_MODE_MIN)."""
        ...

    async def ack(self, group: str, topic: str, receipt_handle: str) -> None:
        """Settle a popped message of `topic` (as delivered) for good. MessagingError if the handle
        is not current: acked already, redelivered, or replaced by change_invisible_time."""
        ...

    async def ack_batch(
        self, group: str, topic: str, receipt_handles: list[str]
    ) -> list[MessagingError | None]:
        """Settle many popped messages of `topic` at once (one ack record per pop where the broker
        allows): an error, or None, per handle, in order."""
        ...

    async def change_invisible_time(
        self, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        """Keep a popped message invisible for `invisible_ms` from now (0: at once visible again);
        returns its new receipt handle, which replaces the old one."""
        ...

    async def dead_letter(self, group: str, topic: str, receipt_handle: str) -> None:
        """Move a popped message of `topic` to the group's dead-letter queue (%DLQ%<group>) now and
        settle it: a consumer giving up on it (gRPC's ForwardMessageToDeadLetterQueue).
        MessagingError if the handle is not current."""
        ...
