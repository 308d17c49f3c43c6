"""The open checkpoints: which popped messages are still unacknowledged, and until when.

Pure bookkeeping (no I/O): the pop service adds checkpoints and settles acks here, the revive
service asks for the ones whose invisible time has passed. A checkpoint's un-acked offsets are a
bitmap, so an ack of a batch is one integer operation.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

from ferrymq.broker.pop.records import CheckpointRecord
from ferrymq.protocol.pop import bits_of

Key = tuple[str, str, int, int, int]  # group, topic, queue id, start offset, pop time
QueueKey = tuple[str, str, int]  # group, topic, queue id


class OpenCheckpoint:
    __slots__ = ("_index", "deadline", "pending", "record", "revive_offset", "revive_queue")

    def __init__(self, record: CheckpointRecord, revive_queue: int, revive_offset: int) -> None:
        self.record = record
        self.pending = (1 << len(record.offsets)) - 1
        self.deadline = record.pop_time + record.invisible_time
        self.revive_queue = revive_queue  # where its records are in the revive topic
        self.revive_offset = revive_offset  # the queue offset of the checkpoint record there
        self._index: dict[int, int] | None = None

    def offsets(self, bits: int) -> list[int]:
        """The queue offsets of the bits set in `bits`."""
        start, diffs = self.record.start_offset, self.record.offsets
        return [start + d for i, d in enumerate(diffs) if bits >> i & 1]

    def index(self) -> dict[int, int]:
        """Offset relative to the start -> bit index (made on first use: most acks come once per batch)."""
        if self._index is None:
            self._index = {d: i for i, d in enumerate(self.record.offsets)}
        return self._index

    def index_of(self, offset: int) -> int:
        return self.index().get(offset - self.record.start_offset, -1)

    def _contiguous(self) -> bool:
        """Whether it holds every offset from its start (no filter skipped one): then the bit of
        relative offset i is its bit i, and a batch ack needs no look-ups."""
        offsets = self.record.offsets
        return bool(offsets) and offsets[-1] == len(offsets) - 1

    def own_bits(self, relative: int) -> tuple[int, int]:
        """`relative` (bit i: offset start + i, as BATCH_ACK_MESSAGE says it) as bits of this
        checkpoint, and the relative bits of offsets it does not hold."""
        if self._contiguous():
            full = (1 << len(self.record.offsets)) - 1
            return relative & full, relative & ~full
        index = self.index()
        own = foreign = 0
        for i in bits_of(relative):
            j = index.get(i)
            if j is None:
                foreign |= 1 << i
            else:
                own |= 1 << j
        return own, foreign

    def relative_bits(self, own: int) -> int:
        """The inverse of own_bits: bits of this checkpoint as bits relative to its start."""
        if self._contiguous():
            return own
        offsets = self.record.offsets
        out = 0
        for j in bits_of(own):
            out |= 1 << offsets[j]
        return out


class CheckpointTable:
    def __init__(self) -> None:
        self._open: dict[Key, OpenCheckpoint] = {}
        self._fifo: dict[QueueKey, set[Key]] = defaultdict(set)
        self._deadlines: list[tuple[int, Key]] = []  # a heap; entries of settled checkpoints linger

    def __len__(self) -> int:
        return len(self._open)

    def in_flight(self) -> dict[tuple[str, str], int]:
        """(topic, group) → messages handed out and neither acked nor revived yet (for metrics)."""
        counts: dict[tuple[str, str], int] = {}
        for ck in list(self._open.values()):
            key = (ck.record.topic, ck.record.group)
            counts[key] = counts.get(key, 0) + ck.pending.bit_count()
        return counts

    def clear(self) -> None:
        self._open.clear()
        self._fifo.clear()
        self._deadlines.clear()

    def get(self, key: Key) -> OpenCheckpoint | None:
        return self._open.get(key)

    def add(self, ck: OpenCheckpoint) -> None:
        key = ck.record.key
        self._open[key] = ck
        if ck.record.order:
            self._fifo[key[:3]].add(key)
        else:
            heapq.heappush(self._deadlines, (ck.deadline, key))

    def settle(self, key: Key, bits: int) -> int:
        """Mark offsets done; the bits that were still pending (0: none, or no such checkpoint)."""
        ck = self._open.get(key)
        if ck is None:
            return 0
        done = ck.pending & bits
        ck.pending &= ~bits
        if not ck.pending:
            self._close(key, ck)
        return done

    def reopen(self, ck: OpenCheckpoint, bits: int) -> None:
        """Undo a settle whose record could not be stored."""
        if ck.record.key not in self._open:
            ck.pending = 0
            self.add(ck)
        ck.pending |= bits

    def _close(self, key: Key, ck: OpenCheckpoint) -> None:
        del self._open[key]
        if ck.record.order:
            keys = self._fifo.get(key[:3])
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._fifo[key[:3]]

    def due(self, now: int) -> list[OpenCheckpoint]:
        """Open non-FIFO checkpoints whose invisible time has passed, soonest first."""
        out = []
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            deadline, key = heapq.heappop(heap)
            ck = self._open.get(key)
            if ck is not None and ck.deadline == deadline:
                out.append(ck)
        return out

    def next_deadline(self) -> int | None:
        heap = self._deadlines
        while heap and heap[0][1] not in self._open:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def fifo(self, group: str, topic: str, queue_id: int) -> list[OpenCheckpoint]:
        """The open FIFO checkpoints of one queue (a queue with any is held back)."""
        return [self._open[k] for k in self._fifo.get((group, topic, queue_id), ())]

    def fifo_deadlines(self) -> list[tuple[int, str, int]]:
        """(deadline, topic, queue id) of every FIFO-held queue: when its pops may go on."""
        out = []
        for (_, topic, queue_id), keys in self._fifo.items():
            out.append((max(self._open[k].deadline for k in keys), topic, queue_id))
        return out

    def low_waters(self) -> dict[int, int]:
        """Per revive queue, the earliest checkpoint record still open there (replay starts there)."""
        low: dict[int, int] = {}
        for ck in self._open.values():
            queue = ck.revive_queue
            if ck.revive_offset < low.get(queue, ck.revive_offset + 1):
                low[queue] = ck.revive_offset
        return low
