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

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        queues = self.table.get(f"{topic}@{group}")
        return None if queues is None else queues.get(queue_id)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(f"{topic}@{group}", {})[queue_id] = offset
        self._dirty = True

    def remove_topic(self, topic: str) -> None:
        self.table = {k: v for k, v in self.table.items() if k.split("@", 1)[0] != topic}
        self._dirty = True

    def remove_group(self, group: str) -> None:
        self.table = {k: v for k, v in self.table.items() if k.split("@", 1)[1] != group}
        self._dirty = True

    def adopt(self, wrapper: ConsumerOffsetSerializeWrapper) -> None:
        """Take the master's offsets (a slave's copy); offsets only move forward."""
        for key, queues in wrapper.offset_table.items():
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
