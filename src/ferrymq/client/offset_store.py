"""Where a push consumer keeps its progress: on the brokers (clustering) or in a local file (broadcasting).

Consumers update offsets in memory as messages finish; a store pushes them out every 5 s and once
more when it closes (RocketMQ's persistConsumerOffsetInterval), so a crash re-delivers at most a
few seconds of messages and a clean shutdown none.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

import msgspec

from ferrymq.client.instance import ClientInstance
from ferrymq.client.message import MessageQueue
from ferrymq.client.pull import commit_offset, query_offset
from ferrymq.net.tasks import BackgroundTasks

log = logging.getLogger(__name__)

PERSIST_INTERVAL = 5.0


class OffsetStore:
    """Offsets in memory, persisted periodically by a subclass's `_persist`."""

    def __init__(self) -> None:
        self.offsets: dict[MessageQueue, int] = {}
        self._tasks = BackgroundTasks(f"offset store {type(self).__name__}")

    def start(self) -> None:
        self._tasks.spawn(self._persist_periodically(), name="persist offsets")

    async def close(self) -> None:
        """Stop the periodic task and persist one last time."""
        await self._tasks.close()
        await self.persist()

    def update(self, mq: MessageQueue, offset: int) -> None:
        self.offsets[mq] = offset

    def get(self, mq: MessageQueue) -> int | None:
        return self.offsets.get(mq)

    def remove(self, mq: MessageQueue) -> None:
        """Forget a queue this consumer no longer owns (after persisting it)."""
        self.offsets.pop(mq, None)

    async def read(self, mq: MessageQueue) -> int | None:
        """The persisted offset of a queue, or None if the group never stored one."""
        raise NotImplementedError

    async def persist(self, mqs: Iterable[MessageQueue] | None = None) -> None:
        """Push out the given queues' offsets (all by default)."""
        chosen = self.offsets if mqs is None else {mq: self.offsets[mq] for mq in mqs if mq in self.offsets}
        try:
            await self._persist(dict(chosen))
        except Exception as e:
            log.warning("persisting consumer offsets failed: %s", e)

    async def _persist(self, offsets: dict[MessageQueue, int]) -> None:
        raise NotImplementedError

    async def _persist_periodically(self) -> None:
        while True:
            await asyncio.sleep(PERSIST_INTERVAL)
            await self.persist()


class RemoteOffsetStore(OffsetStore):
    """Clustering: offsets belong to the group, so they live on the broker that holds each queue."""

    def __init__(
        self, instance: ClientInstance, group: str, addr_of: Callable[[MessageQueue], Awaitable[str]]
    ) -> None:
        super().__init__()
        self.instance = instance
        self.group = group
        self.addr_of = addr_of
        self._sent: dict[MessageQueue, int] = {}

    async def read(self, mq: MessageQueue) -> int | None:
        offset = await query_offset(self.instance, await self.addr_of(mq), mq, self.group)
        return offset if offset is not None and offset >= 0 else None

    def remove(self, mq: MessageQueue) -> None:
        super().remove(mq)
        self._sent.pop(mq, None)

    async def _persist(self, offsets: dict[MessageQueue, int]) -> None:
        for mq, offset in offsets.items():
            if self._sent.get(mq) != offset:
                await commit_offset(self.instance, await self.addr_of(mq), mq, self.group, offset)
                self._sent[mq] = offset


class _Entry(msgspec.Struct, rename="camel"):
    topic: str
    broker_name: str
    queue_id: int
    offset: int


class _OffsetFile(msgspec.Struct, rename="camel"):
    offset_table: list[_Entry] = []


class LocalOffsetStore(OffsetStore):
    """Broadcasting: every member reads every queue, so each keeps its own offsets in a JSON file.

    The file sits at `<dir>/<group>/offsets.json`, `dir` defaulting to RocketMQ's
    `~/.rocketmq_offsets/<clientId>`; give a fixed `dir` to resume after a restart, since client
    ids change with the process.
    """

    def __init__(self, directory: str | os.PathLike | None, client_id: str, group: str) -> None:
        super().__init__()
        base = Path(directory) if directory is not None else Path.home() / ".rocketmq_offsets" / client_id
        self.path = base / group / "offsets.json"
        self._stored = self._load()

    def _load(self) -> dict[MessageQueue, int]:
        try:
            data = msgspec.json.decode(self.path.read_bytes(), type=_OffsetFile)
        except FileNotFoundError:
            return {}
        except (OSError, msgspec.DecodeError) as e:
            log.error("ignoring unreadable offsets file %s: %s", self.path, e)
            return {}
        return {MessageQueue(e.topic, e.broker_name, e.queue_id): e.offset for e in data.offset_table}

    async def read(self, mq: MessageQueue) -> int | None:
        return self._stored.get(mq)

    async def _persist(self, offsets: dict[MessageQueue, int]) -> None:
        if all(self._stored.get(mq) == offset for mq, offset in offsets.items()):
            return
        self._stored.update(offsets)
        table = [_Entry(mq.topic, mq.broker_name, mq.queue_id, off) for mq, off in self._stored.items()]
        await asyncio.to_thread(_write_atomically, self.path, msgspec.json.encode(_OffsetFile(table)))


def _write_atomically(path: Path, data: bytes) -> None:
    """Write beside the file, then rename over it: a crash leaves the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
