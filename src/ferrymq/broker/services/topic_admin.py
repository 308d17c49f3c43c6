"""Creating and deleting topics on this broker: what UPDATE_AND_CREATE_TOPIC and
DELETE_TOPIC_IN_BROKER do after their checks, and what a front in the broker's process (the AMQP
gateway declaring and deleting queues) calls directly."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ferrymq.broker.offsets import ConsumerOffsetManager
from ferrymq.broker.topics import TopicConfigManager
from ferrymq.protocol.bodies import TopicConfig
from ferrymq.store import MessageStore


class TopicAdmin:
    def __init__(
        self,
        topics: TopicConfigManager,
        store: MessageStore,
        offsets: ConsumerOffsetManager,
        topics_changed: Callable[[], None],
    ) -> None:
        """`topics_changed`: tell the NameServers soon."""
        self.topics = topics
        self.store = store
        self.offsets = offsets
        self._topics_changed = topics_changed

    def create(self, config: TopicConfig) -> None:
        self.create_many([config])

    def create_many(self, configs: list[TopicConfig]) -> None:
        """Several topics with one write of the topic file and one registration."""
        self.topics.put_many(configs)
        self._prepare(configs)
        self._topics_changed()

    async def create_many_off_loop(self, configs: list[TopicConfig]) -> None:
        """`create_many` with the ConsumeQueue files made on a worker thread: a batch of thousands
        of topics takes seconds of file creation, which must not hold up the broker's other requests."""
        self.topics.put_many(configs)
        await asyncio.to_thread(self._prepare, configs)
        self._topics_changed()

    def _prepare(self, configs: list[TopicConfig]) -> None:
        for config in configs:
            self.store.prepare_topic(config.topic_name, config.write_queue_nums)

    def delete(self, topic: str) -> None:
        """The topic's config, its messages and every group's offsets in it."""
        self.topics.delete(topic)
        self.store.delete_topic(topic)
        self.offsets.remove_topic(topic)
        self._topics_changed()
