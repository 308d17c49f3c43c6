"""The data source's view of a ferrymq cluster, over the SDK: queues, offsets and range reads.

Spark calls are blocking and run in processes of their own, so `Blocking` gives each caller a
private event loop and ClientInstance. Ranges are read with PULL_MESSAGE straight by offset (no
consumer group rebalance): a window of pulls is in flight at once because one pull returns at most
the broker's maxTransferCountOnMessageInMemory messages (32 by default).
"""

from __future__ import annotations

import asyncio
import queue
import struct
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ferrymq.client.instance import ClientInstance
from ferrymq.client.message import MessageQueue
from ferrymq.client.pull import PullStatus, master_addr, pull_raw, queue_offset
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.record import POS_QUEUEOFFSET
from ferrymq.spark.errors import DataLossError, SparkSourceError
from ferrymq.spark.options import EARLIEST, LATEST, OffsetSpec

T = TypeVar("T")
PULL_SIZE = 32  # RocketMQ's default maxTransferCountOnMessageInMemory: asking for more gets no more
PULL_WINDOW = 8  # pulls in flight per queue
_QUEUE_OFFSET = struct.Struct(">q")


def queue_key(mq: MessageQueue) -> str:
    return f"{mq.broker_name}:{mq.queue_id}"


def parse_queue(topic: str, key: str) -> MessageQueue:
    """The queue a checkpoint key ("brokerName:queueId") names."""
    broker, _, queue_id = key.rpartition(":")
    return MessageQueue(topic=topic, broker_name=broker, queue_id=int(queue_id))


class Blocking:
    """A private event loop and ClientInstance for blocking callers (Spark's driver and workers)."""

    def __init__(self, namesrv: str) -> None:
        self._runner = asyncio.Runner(loop_factory=_uvloop_factory())
        self.instance: ClientInstance = self._runner.run(_make_instance(namesrv))

    def run(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        return self._runner.run(fn(self.instance, *args))

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        """A blocking iterator over an async iterator that runs on this loop."""

        async def step():
            return await anext(agen, _END)

        while (item := self._runner.run(step())) is not _END:
            yield item

    def close(self) -> None:
        self._runner.run(self.instance.close())
        self._runner.close()

    def __enter__(self) -> Blocking:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prefetched(
    namesrv: str, items: Callable[[ClientInstance], AsyncGenerator[T, None]], depth: int = 4
) -> Iterator[T]:
    """The items of `items(instance)`, made on a thread of their own up to `depth` ahead of the caller.

    A Spark worker is one thread: without this its pulls would wait while it serializes a batch, and
    it would wait while pulls are in flight. The thread has its own Blocking; it stops within
    PUT_WAIT of the caller closing the iterator, and its errors are raised to the caller. (It pays
    off for long batch reads; streaming micro-batches measured slower with it, so they read inline.)
    """
    ready: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def offer(item: object) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=PUT_WAIT)
                return True
            except queue.Full:
                pass
        return False

    def produce() -> None:
        try:
            with Blocking(namesrv) as cluster:
                agen = items(cluster.instance)
                for item in cluster.iterate(agen):
                    if not offer(item):
                        break
                cluster.run(lambda _: agen.aclose())
            offer(_END)
        except BaseException as e:  # handed to the caller, who raises it
            offer(e)

    thread = threading.Thread(target=produce, name="ferrymq-prefetch", daemon=True)
    thread.start()
    try:
        while (item := ready.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


_END = object()
PUT_WAIT = 0.1


def _uvloop_factory():
    """uvloop's loop for this Runner alone (Spark's worker processes are not ours to reconfigure)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def _make_instance(namesrv: str) -> ClientInstance:
    return ClientInstance(namesrv)


async def topic_queues(
    instance: ClientInstance, topics: tuple[str, ...], wanted: frozenset[str] | None
) -> list[MessageQueue]:
    """The readable queues of `topics` (only those named in `wanted`, if given)."""
    queues: list[MessageQueue] = []
    for topic in topics:
        route = await instance.existing_route(topic)
        if route is None:
            raise SparkSourceError(
                f"topic {topic} does not exist on the cluster of NameServer {';'.join(instance.namesrvs)}"
            )
        queues += route.read_queues
    if wanted is None:
        return queues
    chosen = [mq for mq in queues if queue_key(mq) in wanted or str(mq.queue_id) in wanted]
    known = {queue_key(mq) for mq in queues} | {str(mq.queue_id) for mq in queues}
    if unknown := sorted(wanted - known):
        raise SparkSourceError(f'option "queues" names queues that do not exist: {", ".join(unknown)}')
    return chosen


async def queue_bounds(instance: ClientInstance, mq: MessageQueue) -> tuple[int, int]:
    """(min offset, max offset) of a queue: the first message still kept, and one past the last."""
    addr = await master_addr(instance, mq)
    low = await queue_offset(instance, addr, mq, RequestCode.GET_MIN_OFFSET)
    return low, await queue_offset(instance, addr, mq, RequestCode.GET_MAX_OFFSET)


async def resolve_offsets(
    instance: ClientInstance, queues: list[MessageQueue], spec: OffsetSpec, name: str
) -> dict[MessageQueue, int]:
    """Each queue's offset as `spec` says, clamped to what the queue holds. Queues the JSON leaves
    out start at the earliest offset (starting) or end at the latest (ending)."""
    if isinstance(spec, dict):
        _check_queue_keys(queues, spec, name)
    result = {}
    for mq in queues:
        low, high = await queue_bounds(instance, mq)
        if spec == "earliest":
            result[mq] = low
        elif spec == "latest":
            result[mq] = high
        elif isinstance(spec, tuple):
            addr = await master_addr(instance, mq)
            found = await queue_offset(
                instance, addr, mq, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp=str(spec[1])
            )
            result[mq] = min(max(found, low), high)
        else:
            wanted = json_offset(spec, mq, EARLIEST if name.startswith("starting") else LATEST)
            result[mq] = low if wanted == EARLIEST else high if wanted == LATEST else min(wanted, high)
    return result


_Default = TypeVar("_Default", int, None)


def json_offset(spec: dict[str, dict[str, int]], mq: MessageQueue, default: _Default) -> int | _Default:
    """The offset per-queue JSON gives `mq` (named "brokerName:queueId" or "queueId"), or `default`."""
    queues = spec.get(mq.topic, {})
    return queues.get(queue_key(mq), queues.get(str(mq.queue_id), default))


def _check_queue_keys(queues: list[MessageQueue], spec: dict[str, dict[str, int]], name: str) -> None:
    for topic, offsets in spec.items():
        mine = [mq for mq in queues if mq.topic == topic]
        for key in offsets:
            matches = [mq for mq in mine if key in (queue_key(mq), str(mq.queue_id))]
            if not matches:
                raise SparkSourceError(f'option "{name}" names queue {key!r} of {topic}, which is not read')
            if len(matches) > 1:
                raise SparkSourceError(
                    f'option "{name}": queue {key!r} of {topic} is ambiguous; name it "brokerName:{key}"'
                )


@dataclass(frozen=True)
class QueueRange:
    """Offsets [start, end) of one queue, and what to do if some of them are gone."""

    mq: MessageQueue
    start: int
    end: int
    fail_on_data_loss: bool = True


async def read_range(
    instance: ClientInstance, group: str, r: QueueRange
) -> AsyncGenerator[list[bytes | memoryview], None]:
    """The stored records of `r` in offset order (PULL_MESSAGE bodies), a window of pulls at a time."""
    addr = await master_addr(instance, r.mq)
    offset = r.start
    while offset < r.end:
        starts = range(offset, min(r.end, offset + PULL_WINDOW * PULL_SIZE), PULL_SIZE)
        parts = await asyncio.gather(
            *(_read_slice(instance, addr, group, r, s, min(s + PULL_SIZE, r.end)) for s in starts)
        )
        yield [body for part in parts for body in part]
        offset = min(r.end, starts[-1] + PULL_SIZE)


async def _read_slice(
    instance: ClientInstance, addr: str, group: str, r: QueueRange, start: int, end: int
) -> list[bytes | memoryview]:
    """Offsets [start, end) of one queue: one pull, more if the broker answered with fewer.

    With no tag filter every offset up to nextBeginOffset is in the answer, so the records need no
    decoding here; only the first one's offset is read, to notice messages retention deleted.
    """
    out: list[bytes | memoryview] = []
    offset = start
    for _ in range(end - start + 3):  # each round advances by one message at least, or fails
        if offset >= end:
            return out
        result = await pull_raw(instance, addr, r.mq, group, offset, max_messages=end - offset)
        if result.status is PullStatus.FOUND and result.body:
            first = _QUEUE_OFFSET.unpack_from(result.body, POS_QUEUEOFFSET)[0]
            if first > offset:
                _lost(r, offset, first)
            if result.next_begin_offset > end:
                raise SparkSourceError(f"{r.mq.topic} {queue_key(r.mq)}: the broker sent past offset {end}")
            out.append(result.body)
            offset = max(result.next_begin_offset, offset + 1)
        elif result.status in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG):
            offset = max(result.next_begin_offset, offset + 1)
        elif result.status is PullStatus.OFFSET_ILLEGAL and offset < result.min_offset:
            _lost(r, offset, result.min_offset)
            offset = result.min_offset
        else:
            raise SparkSourceError(
                f"{r.mq.topic} {queue_key(r.mq)} has no message at offset {offset} (its offsets now run "
                f"{result.min_offset}..{result.max_offset}); was the topic deleted or the store replaced?"
            )
    raise SparkSourceError(f"reading {r.mq.topic} {queue_key(r.mq)} from {start} made no progress")


def _lost(r: QueueRange, start: int, first_kept: int) -> None:
    if r.fail_on_data_loss:
        raise DataLossError(
            f"{r.mq.topic} {queue_key(r.mq)}: offsets {start}..{first_kept - 1} are gone (retention deleted "
            f"them before they were read). Set failOnDataLoss=false to skip lost messages."
        )
