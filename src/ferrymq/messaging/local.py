"""The message service of a broker in this process: calls its put and read services directly, for a
protocol front embedded in the broker process (RocketMQ 5 proxy's local mode)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ferrymq.broker.clients import ClientRegistry
from ferrymq.broker.pop import PopError, PopService
from ferrymq.broker.schedule.recall import RecallError, RecallService
from ferrymq.broker.services.put import PutService
from ferrymq.broker.services.read import ReadService
from ferrymq.broker.services.topic_admin import TopicAdmin
from ferrymq.broker.topics import TopicConfigManager
from ferrymq.broker.transactions import EndError, TransactionService
from ferrymq.messaging.api import (
    Arrivals,
    ClientCalls,
    ClientRegistration,
    MessageQueue,
    MessagingError,
    PopOutcome,
    QueueData,
    ReadOutcome,
    SendOutcome,
    SubscriptionGroupConfig,
    TopicConfig,
)
from ferrymq.net.errors import RemotingError, RemotingTimeoutError
from ferrymq.protocol.caller import CALLER
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.message_id import parse_offset_msg_id
from ferrymq.protocol.pop import INIT_MODE_MAX
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.protocol.sys_flag import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from ferrymq.protocol.topic_names import AUTO_CREATE_TOPIC

_DEFAULT_QUEUE_NUMS = 4

_UNLIMITED = (float("inf"), 0.0)  # no consume quota: (messages allowed now, wait)


class ClientChannel:
    """A registered client as the broker's client registry sees it: the broker's calls back go to
    the message service's `calls` instead of down a socket (RocketMQ proxy's GrpcClientChannel)."""

    def __init__(self, service: LocalMessageService, client_id: str) -> None:
        self.service = service
        self.remote_address = f"proxy client {client_id}"

    async def send_oneway(self, command: RemotingCommand) -> None:
        await self.request(command, 0.0)

    async def request(self, command: RemotingCommand, timeout: float) -> RemotingCommand:
        calls = self.service.calls
        try:
            async with asyncio.timeout(timeout or None):
                answer = None if calls is None else await calls(self.service.broker_name, command)
        except TimeoutError:
            raise RemotingTimeoutError(f"{self.remote_address}: no answer within {timeout:g} s") from None
        if answer is None and not command.is_oneway:
            raise RemotingError(f"{self.remote_address} cannot answer request code {command.code}")
        return answer  # type: ignore[return-value]  # None only for a oneway request, unread


class LocalMessageService:
    def __init__(
        self, puts: PutService, reads: ReadService, pops: PopService, topics: TopicConfigManager,
        broker_name: str, transactions: TransactionService | None = None,
        recalls: RecallService | None = None,
        clients: ClientRegistry | None = None,
        topic_admin: TopicAdmin | None = None,
    ) -> None:  # fmt: skip
        self.clients = clients if clients is not None else ClientRegistry()
        self.calls: ClientCalls | None = None
        self._channels: dict[str, ClientChannel] = {}  # one per client: the registry knows it by identity
        self.puts = puts
        self.recalls = recalls
        self.transactions = transactions
        self.reads = reads
        self.pops = pops
        self.topics = topics
        self.topic_admin = topic_admin
        self.broker_name = broker_name

    @property
    def max_body_size(self) -> int:
        return self.puts.store.config.max_message_size

    @property
    def in_process(self) -> bool:
        return True

    def watch_arrivals(self, listener: Arrivals) -> Callable[[], None] | None:
        return self.pops.hold.listen(listener)

    async def user_connection_limit(self, user: str) -> int | None:
        return self.puts.quotas.max_connections(user)

    def user_consume_allowance(self, user: str) -> tuple[float, float]:
        quotas = self.puts.quotas
        return quotas.consume_allowance("", "", user) if quotas.consume else _UNLIMITED

    def charge_user_consume(self, user: str, count: int, nbytes: int) -> None:
        quotas = self.puts.quotas
        if quotas.consume:
            quotas.charge_consume("", "", user, count, nbytes)

    def _queue_id(self, queue: MessageQueue | None) -> int:
        if queue is None:
            return -1
        if queue.broker_name != self.broker_name:
            raise MessagingError(
                f"queue {queue.queue_id} of broker {queue.broker_name}: this is broker {self.broker_name}",
                ResponseCode.SYSTEM_ERROR,
            )
        return queue.queue_id

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
        return await self.puts.put(
            topic, self._queue_id(queue), body, properties.encode(), flag, sys_flag, born_timestamp,
            born_host, reconsume_times, None, False, AUTO_CREATE_TOPIC, _DEFAULT_QUEUE_NUMS, CALLER.get(),
        )  # fmt: skip

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
        return await self.puts.put(
            topic, self._queue_id(queue), batch_body, b"", 0, sys_flag, born_timestamp, born_host, 0, None,
            True, AUTO_CREATE_TOPIC, _DEFAULT_QUEUE_NUMS, CALLER.get(),
        )  # fmt: skip

    async def end_transaction(
        self,
        producer_group: str,
        sent: SendOutcome,
        commit: bool,
        *,
        topic: str = "",
        transaction_id: str = "",
    ) -> None:
        if self.transactions is None:
            raise MessagingError("this message service has no transactions", ResponseCode.SYSTEM_ERROR)
        if sent.broker_name != self.broker_name:
            raise MessagingError(f"half message of broker {sent.broker_name}: this is {self.broker_name}")
        try:
            _, _, commit_log_offset = parse_offset_msg_id(sent.msg_id)
            state = TRANSACTION_COMMIT_TYPE if commit else TRANSACTION_ROLLBACK_TYPE
            await self.transactions.end(producer_group, commit_log_offset, sent.queue_offset, state)
        except (EndError, MessageDecodeError) as e:
            raise MessagingError(str(e), ResponseCode.SYSTEM_ERROR) from None

    async def recall(self, topic: str, recall_handle: str, *, producer_group: str = "") -> str:
        if self.recalls is None:
            raise MessagingError("this message service recalls no message", ResponseCode.SYSTEM_ERROR)
        try:
            return await self.recalls.recall(topic, recall_handle, producer_group)
        except RecallError as e:
            raise MessagingError(str(e), e.code) from None

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
        return await self.reads.read(
            group, queue.topic, self._queue_id(queue), offset, max_count, 0, expression, expression_type,
            commit_offset, suspend_ms > 0, suspend_ms,
        )  # fmt: skip

    async def query_offset(self, group: str, queue: MessageQueue) -> int | None:
        return self.reads.committed_offset(group, queue.topic, self._queue_id(queue))

    async def commit_offset(self, group: str, queue: MessageQueue, offset: int) -> None:
        self.reads.commit_offset(group, queue.topic, self._queue_id(queue), offset)

    async def queue_bounds(self, queue: MessageQueue) -> tuple[int, int]:
        queue_id, store = self._queue_id(queue), self.reads.store
        return store.get_min_offset(queue.topic, queue_id), store.get_max_offset(queue.topic, queue_id)

    async def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int:
        return self.reads.store.get_offset_in_queue_by_time(queue.topic, self._queue_id(queue), timestamp_ms)

    async def consumer_group(self, group: str, topic: str) -> SubscriptionGroupConfig | None:
        return self.pops.groups.find(group)

    async def route(self, topic: str) -> list[QueueData] | None:
        tc = self.topics.get(topic)
        if tc is None:
            return None
        return [
            QueueData(self.broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)
        ]

    async def topic_config(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    async def create_topic(self, topic: str, queue_nums: int = 1) -> None:
        if self.topic_admin is None:
            raise MessagingError("this message service creates no topic", ResponseCode.SYSTEM_ERROR)
        self.topic_admin.create(TopicConfig(topic, queue_nums, queue_nums))
        await self.topics.saved()

    async def delete_topic(self, topic: str) -> None:
        if self.topic_admin is None:
            raise MessagingError("this message service deletes no topic", ResponseCode.SYSTEM_ERROR)
        self.topic_admin.delete(topic)
        await self.topics.saved()

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
        try:
            found = await self.pops.pop(
                group, topic, self._queue_id(queue), max_count, invisible_ms, poll_ms, expression=expression,
                expression_type=expression_type, init_mode=init_mode, order=fifo,
            )  # fmt: skip
        except PopError as e:
            return PopOutcome(e.code, str(e))
        if not found.count:
            return PopOutcome(ResponseCode.POLLING_TIMEOUT, "no message to pop")
        return PopOutcome(ResponseCode.SUCCESS, None, found.body)

    async def ack(self, group: str, topic: str, receipt_handle: str) -> None:
        try:
            await self.pops.ack(group, topic, receipt_handle)
        except PopError as e:
            raise MessagingError(str(e), e.code) from None

    async def ack_batch(
        self, group: str, topic: str, receipt_handles: list[str]
    ) -> list[MessagingError | None]:
        errors = await self.pops.ack_batch(group, topic, receipt_handles)
        return [None if e is None else MessagingError(str(e), e.code) for e in errors]

    async def change_invisible_time(
        self, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        try:
            return (await self.pops.change_invisible(group, topic, receipt_handle, invisible_ms)).encode()
        except PopError as e:
            raise MessagingError(str(e), e.code) from None

    async def dead_letter(self, group: str, topic: str, receipt_handle: str) -> None:
        try:
            await self.pops.dead_letter(group, topic, receipt_handle)
        except PopError as e:
            raise MessagingError(str(e), e.code) from None

    async def register_client(self, client: ClientRegistration) -> None:
        channel = self._channels.get(client.client_id)
        if channel is None:
            channel = self._channels[client.client_id] = ClientChannel(self, client.client_id)
        for group in client.producer_groups:
            self.clients.heartbeat_producer(client.client_id, channel, group)
        for consumer in client.consumers:
            self.clients.heartbeat_consumer(client.client_id, channel, consumer)

    async def unregister_client(self, client: ClientRegistration) -> None:
        self._channels.pop(client.client_id, None)
        for group in client.producer_groups:
            self.clients.unregister(client.client_id, group, None)
        for consumer in client.consumers:
            self.clients.unregister(client.client_id, None, consumer.group_name)

    def serve_client_calls(self, calls: ClientCalls) -> None:
        self.calls = calls
