"""The interface every protocol front (gRPC proxy, AMQP gateway) uses to move messages, whether the
broker runs in the same process (`local.LocalMessageService`) or elsewhere in a cluster
(`remote.RemoteMessageService`) — RocketMQ 5 proxy's MessageService, in local and cluster mode.

Rule refusals come back as outcomes carrying RocketMQ's response code (NO_PERMISSION,
TOPIC_NOT_EXIST, MESSAGE_ILLEGAL, ...), the same from both implementations, since the broker's
services decide them; a broker that cannot be reached raises MessagingError.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from ferrymq.broker.services.outcomes import STORED_CODES, PopOutcome, ReadOutcome, SendOutcome
from ferrymq.protocol.bodies import (
    ConsumerData,
    MessageQueue,
    QueueData,
    SubscriptionGroupConfig,
    TopicConfig,
)
from ferrymq.protocol.pop import INIT_MODE_MAX
from ferrymq.protocol.remoting import RemotingCommand

__all__ = [
    "STORED_CODES",
    "Arrivals",
    "ClientCalls",
    "ClientRegistration",
    "MessageQueue",
    "MessageService",
    "MessagingError",
    "PopOutcome",
    "QueueData",
    "ReadOutcome",
    "SendOutcome",
    "SubscriptionGroupConfig",
    "TopicConfig",
]


class MessagingError(Exception):
    """A call that got no answer from the rules: the broker or NameServer is unreachable, or refused
    a call that has no outcome object (offsets). `code` is the response code when there was one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


DEFAULT_MAX_BODY_SIZE = 4 * 1024 * 1024  # RocketMQ's maxMessageSize, broker's and proxy's


@dataclass(frozen=True)
class ClientRegistration:
    """A client the brokers must see as a member of its groups (a gRPC client, whose proxy
    heartbeats for it): its producer groups, its consumer groups with their subscriptions, and the
    topics whose brokers must know it."""

    client_id: str
    producer_groups: tuple[str, ...] = ()
    consumers: tuple[ConsumerData, ...] = ()
    topics: tuple[str, ...] = ()


Arrivals = Callable[[list[tuple[str, int]]], None]
"""A listener to `MessageService.watch_arrivals`."""

ClientCalls = Callable[[str, RemotingCommand], Awaitable[RemotingCommand | None]]
"""`async def call(broker_name, request)`: a broker's request to one of the registered clients
(CHECK_TRANSACTION_STATE, GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY,
NOTIFY_CONSUMER_IDS_CHANGED); its answer, or None for a oneway request."""


class MessageService(Protocol):
    @property
    def max_body_size(self) -> int:
        """The largest message body the brokers take (their max_message_size; a remote service
        assumes RocketMQ's default unless told), so fronts refuse a larger one with their own code."""
        ...

    @property
    def in_process(self) -> bool:
        """Whether the brokers run in this process: a call then waits on no network, so a front makes
        several in turn (within its loop turn) rather than as tasks at once (a turn later)."""
        ...

    def watch_arrivals(self, listener: Arrivals) -> Callable[[], None] | None:
        """Have `listener` called on the event loop with the (topic, queue id) of queues that got new
        messages, so that a front serving many queues pops only those rather than park a long poll
        on each; returns the call that stops it, or None where the service cannot tell (a remote
        broker: long-poll instead)."""
        ...

    async def user_connection_limit(self, user: str) -> int | None:
        """How many connections the brokers' quotas let `user` have at once (None: no limit), for
        fronts that count their own clients' connections (the AMQP gateway)."""
        ...

    def user_consume_allowance(self, user: str) -> tuple[float, float]:
        """(messages `user`'s consume quota lets it take now, inf without one; seconds until one more
        may go when none may), for fronts that pop for many users at once (the AMQP gateway's queue
        feeds) and charge each user what they deliver to it (`charge_user_consume`). A remote
        service answers from the quotas as last read and reads them again in the background."""
        ...

    def charge_user_consume(self, user: str, count: int, nbytes: int) -> None:
        """`count` messages (`nbytes`) were delivered to `user`: its consume quota is charged."""
        ...

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

    async def recall(self, topic: str, recall_handle: str, *, producer_group: str = "") -> str:
        """Cancel a timed message of `topic` before it is due, by the recall handle its send
        answered (SendOutcome.recall_handle); returns its message id. MessagingError if the broker
        refuses: ILLEGAL_OPERATION for a handle that is malformed, of another topic, or due already."""
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

    async def queue_bounds(self, queue: MessageQueue) -> tuple[int, int]:
        """(min offset, max offset) of `queue`: where its first stored message is, and one past its
        last (0, 0 for a queue that never held one)."""
        ...

    async def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """The offset of the first message of `queue` stored at or after `timestamp_ms` (its max
        offset if none is)."""
        ...

    async def consumer_group(self, group: str, topic: str) -> SubscriptionGroupConfig | None:
        """The group's config as the broker of `topic` keeps it (orderly, retries), None if it has
        none there yet (brokers create groups on first use)."""
        ...

    # --- routes -----------------------------------------------------------------------------------

    async def route(self, topic: str) -> list[QueueData] | None:
        """The topic's queues per broker (read/write queue counts, permission), None if it has none."""
        ...

    async def topic_config(self, topic: str) -> TopicConfig | None:
        """The topic's config as a broker of it keeps it (attributes: its message.type), None if it
        has none. The remote service may answer from a copy up to TOPIC_CONFIG_TTL_S old."""
        ...

    async def create_topic(self, topic: str, queue_nums: int = 1) -> None:
        """Create `topic` (or update its queue counts) on every master, and return once sends and
        pops can find it (a queue a front declares: the AMQP gateway's queues)."""
        ...

    async def delete_topic(self, topic: str) -> None:
        """Delete `topic`, its messages and its groups' offsets everywhere (an absent one is no error)."""
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

    # --- clients the brokers call back ----------------------------------------------------------

    async def register_client(self, client: ClientRegistration) -> None:
        """Make the brokers see `client` in its groups (and keep seeing it: call again within the
        brokers' channel expiry). MessagingError if no broker could be told."""
        ...

    async def unregister_client(self, client: ClientRegistration) -> None:
        """The client is gone: the brokers forget it in its groups."""
        ...

    def serve_client_calls(self, calls: ClientCalls) -> None:
        """Hand the brokers' requests to registered clients to `calls`."""
        ...
