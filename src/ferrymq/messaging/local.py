"""The message service of a broker in this process: calls its put and read services directly, for a
protocol front embedded in the broker process (RocketMQ 5 proxy's local mode)."""

from __future__ import annotations

from ferrymq.broker.services.put import PutService
from ferrymq.broker.services.read import ReadService
from ferrymq.broker.topics import TopicConfigManager
from ferrymq.messaging.api import MessageQueue, MessagingError, QueueData, ReadOutcome, SendOutcome
from ferrymq.protocol.codes import ResponseCode

_DEFAULT_TOPIC, _DEFAULT_QUEUE_NUMS = "TBW102", 4


class LocalMessageService:
    def __init__(
        self, puts: PutService, reads: ReadService, topics: TopicConfigManager, broker_name: str
    ) -> None:
        self.puts = puts
        self.reads = reads
        self.topics = topics
        self.broker_name = broker_name

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
            born_host, reconsume_times, None, False, _DEFAULT_TOPIC, _DEFAULT_QUEUE_NUMS,
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
            True, _DEFAULT_TOPIC, _DEFAULT_QUEUE_NUMS,
        )  # fmt: skip

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

    async def route(self, topic: str) -> list[QueueData] | None:
        tc = self.topics.get(topic)
        if tc is None:
            return None
        return [
            QueueData(self.broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)
        ]

    # pop / ack / change_invisible_time (see api.MessageService): over the broker's pop service
