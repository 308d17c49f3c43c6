"""Topic configurations of one broker, persisted in config/topics.json."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from ferrymq.broker.persisted import CoalescedSave, load_json, next_version
from ferrymq.protocol.bodies import TopicConfig, TopicConfigSerializeWrapper
from ferrymq.protocol.topic_names import AUTO_CREATE_TOPIC, SELF_TEST_TOPIC

PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 8, 4, 2, 1
RETRY_GROUP_PREFIX = "%RETRY%"
DLQ_GROUP_PREFIX = "%DLQ%"


class TopicConfigManager:
    def __init__(self, config_dir: Path, broker_name: str, cluster_name: str, default_queue_nums: int,
                 auto_create: bool, hold_after_delete: float = 0.0) -> None:  # fmt: skip
        """`hold_after_delete`: seconds during which a deleted topic is not auto-created again."""
        self.path = config_dir / "topics.json"
        wrapper = load_json(self.path, TopicConfigSerializeWrapper)
        self.topics: dict[str, TopicConfig] = dict(wrapper.topic_config_table)
        self.data_version = wrapper.data_version
        self.file = CoalescedSave(self.path, self.wrapper)
        self._lock = threading.Lock()
        self.hold_after_delete = hold_after_delete
        self._deleted: dict[str, float] = {}  # topic -> when it was deleted (monotonic), oldest first
        template_perm = PERM_READ | PERM_WRITE | (PERM_INHERIT if auto_create else 0)
        system = [
            TopicConfig(AUTO_CREATE_TOPIC, default_queue_nums, default_queue_nums, template_perm),
            TopicConfig(SELF_TEST_TOPIC, 1, 1),
            TopicConfig(cluster_name, 16, 16, PERM_READ | PERM_WRITE | (PERM_INHERIT if auto_create else 0)),
            TopicConfig(broker_name, 1, 1, PERM_READ | PERM_WRITE | PERM_INHERIT),
        ]
        for tc in system:
            self.topics.setdefault(tc.topic_name, tc)

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def put(self, tc: TopicConfig) -> None:
        self.put_many([tc])

    def put_many(self, configs: list[TopicConfig]) -> None:
        """Add or replace several topics; one background write of the file covers them all."""
        with self._lock:
            self.topics = {**self.topics, **{tc.topic_name: tc for tc in configs}}
            for tc in configs:
                self._deleted.pop(tc.topic_name, None)
            self._changed()

    def create_from_template(self, topic: str, template: str, queue_nums: int) -> TopicConfig | None:
        """Auto-create `topic` on first send, as RocketMQ does from TBW102; None if not allowed (nor
        while `held_after_delete`)."""
        existing = self.topics.get(topic)
        if existing is not None:
            return existing
        if self.held_after_delete(topic):
            return None
        base = self.topics.get(template)
        if base is None or not base.perm & PERM_INHERIT:
            return None
        queues = max(1, min(queue_nums, base.write_queue_nums))
        tc = TopicConfig(topic, queues, queues, base.perm & ~PERM_INHERIT)
        self.put(tc)
        return tc

    def ensure(self, topic: str, queue_nums: int, perm: int = PERM_READ | PERM_WRITE) -> bool:
        """Create a system-made topic (retry topics) if missing; True when it was created."""
        if topic in self.topics:
            return False
        self.put(TopicConfig(topic, queue_nums, queue_nums, perm))
        return True

    def adopt(self, wrapper: TopicConfigSerializeWrapper) -> None:
        """Take the master's topic table (a slave's copy), if it changed since the last one taken."""
        if wrapper.data_version == self.data_version:
            return
        with self._lock:
            self.topics = dict(wrapper.topic_config_table)
            self.data_version = wrapper.data_version
            self.file.changed()

    def delete(self, topic: str) -> bool:
        with self._lock:
            if topic not in self.topics:
                return False
            self.topics = {k: v for k, v in self.topics.items() if k != topic}
            self._hold(topic)
            self._changed()
            return True

    def held_after_delete(self, topic: str) -> bool:
        """Was `topic` deleted here less than `hold_after_delete` s ago (and not created since)?
        Producers with a route from before (a topic moved to other brokers) are then refused, fetch
        the route again and go where it is now, rather than auto-creating it back here."""
        deleted = self._deleted.get(topic)
        return deleted is not None and time.monotonic() - deleted < self.hold_after_delete

    def _hold(self, topic: str) -> None:
        """Remember the deletion; forget the ones past the hold (oldest first, so each is dropped once)."""
        if self.hold_after_delete <= 0:
            return
        now = time.monotonic()
        deleted = self._deleted
        deleted.pop(topic, None)
        while deleted and now - next(iter(deleted.values())) >= self.hold_after_delete:
            del deleted[next(iter(deleted))]
        deleted[topic] = now

    def touch(self) -> None:
        """A new data version with the same topics, so that NameServers take the table again
        (after the broker's permission changed, which the published table carries)."""
        with self._lock:
            self._changed()

    async def saved(self) -> None:
        """Return once the changes made so far are on disk (what an admin request answers after)."""
        await self.file.saved()

    def wrapper(self) -> TopicConfigSerializeWrapper:
        return TopicConfigSerializeWrapper(
            topic_config_table=dict(self.topics), data_version=self.data_version
        )

    def _changed(self) -> None:
        self.data_version = next_version(self.data_version)
        self.file.changed()
