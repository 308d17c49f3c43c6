"""Creating and deleting topics on this broker: what UPDATE_AND_CREATE_TOPIC and
DELETE_TOPIC_IN_BROKER do after their checks, and what a front in the broker's process (the AMQP
gateway declaring and deleting queues) calls directly."""

from __future__ import annotations

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
        for config in configs:
            self.store.prepare_topic(config.topic_name, config.write_queue_nums)
        self._topics_changed()

    def delete(self, topic: str) -> None:
        """The topic's config, its messages and every group's offsets in it."""
        self.topics.delete(topic)
        self.store.delete_topic(topic)
        self.offsets.remove_topic(topic)
        self._topics_changed()
