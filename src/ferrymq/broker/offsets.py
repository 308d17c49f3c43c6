"""Consumer offsets per group, topic and queue, persisted in config/consumerOffset.json."""

from __future__ import annotations

from pathlib import Path

from ferrymq.broker.persisted import load_json, save_json
from ferrymq.protocol.bodies import ConsumerOffsetSerializeWrapper


class ConsumerOffsetManager:
    """Offsets live in memory and are written every `flush_consumer_offset_interval` and at stop.

    Keys are RocketMQ's "topic@group", so the file reads the same as a RocketMQ broker's.
    """

    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / "consumerOffset.json"
        self.table: dict[str, dict[int, int]] = {
            key: dict(queues)
            for key, queues in load_json(self.path, ConsumerOffsetSerializeWrapper).offset_table.items()
        }
        self._dirty = False
        self._by_group: dict[str, set[str]] | None = None  # group → topics; rebuilt when keys change
        self._by_topic: dict[str, set[str]] | None = None

    def _index(self) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
        if self._by_group is None or self._by_topic is None:
            by_group: dict[str, set[str]] = {}
            by_topic: dict[str, set[str]] = {}
            for key in self.table:
                topic, _, group = key.partition("@")
                by_group.setdefault(group, set()).add(topic)
                by_topic.setdefault(topic, set()).add(group)
            self._by_group, self._by_topic = by_group, by_topic
        return self._by_group, self._by_topic

    def topics_of(self, group: str) -> set[str]:
        """The topics `group` has offsets on (RocketMQ's whichTopicByConsumer)."""
        return set(self._index()[0].get(group, ()))

    def groups_of(self, topic: str) -> set[str]:
        """The groups with offsets on `topic` (RocketMQ's whichGroupByTopic)."""
        return set(self._index()[1].get(topic, ()))

    def clone(self, src_group: str, dest_group: str, topic: str) -> bool:
        """Give `dest_group` a copy of `src_group`'s offsets on `topic`; False if it has none."""
        queues = self.table.get(f"{topic}@{src_group}")
        if queues is None:
            return False
        self.table[f"{topic}@{dest_group}"] = dict(queues)
        self._by_group = self._by_topic = None
        self._dirty = True
        return True

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        queues = self.table.get(f"{topic}@{group}")
        return None if queues is None else queues.get(queue_id)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        queues = self.table.get(f"{topic}@{group}")
        if queues is None:
            queues = self.table[f"{topic}@{group}"] = {}
            self._by_group = self._by_topic = None
        queues[queue_id] = offset
        self._dirty = True

    def remove_topic(self, topic: str) -> None:
        self.table = {k: v for k, v in self.table.items() if k.split("@", 1)[0] != topic}
        self._by_group = self._by_topic = None
        self._dirty = True

    def remove_group(self, group: str) -> None:
        self.table = {k: v for k, v in self.table.items() if k.split("@", 1)[1] != group}
        self._by_group = self._by_topic = None
        self._dirty = True

    def adopt(self, wrapper: ConsumerOffsetSerializeWrapper) -> None:
        """Take the master's offsets (a slave's copy); offsets only move forward."""
        for key, queues in wrapper.offset_table.items():
            if key not in self.table:
                self._by_group = self._by_topic = None
            mine = self.table.setdefault(key, {})
            for queue_id, offset in queues.items():
                if offset > mine.get(queue_id, -1):
                    mine[queue_id] = offset
                    self._dirty = True

    def wrapper(self) -> ConsumerOffsetSerializeWrapper:
        return ConsumerOffsetSerializeWrapper(offset_table=self.table)

    def persist(self) -> None:
        if self._dirty:
            self._dirty = False
            save_json(self.path, self.wrapper())
