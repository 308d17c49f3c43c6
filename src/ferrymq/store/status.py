"""Results of puts and gets, with RocketMQ's status names so the broker can map them to codes."""

from __future__ import annotations

import asyncio
import enum
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from ferrymq.protocol.record import CQ_ENTRY


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    DISK_FULL = "DISK_FULL"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class PutResult:
    """The outcome of a put. With SYNC_FLUSH the write is durable only once `wait`/`durable` says so.

    `flush_future` resolves once the write is durable; a PutStatus as its result says the write
    failed after all (a replicated put that was not committed)."""

    __slots__ = (
        "entries",
        "flush_future",
        "flush_timeout",
        "message_count",
        "queue_offset",
        "remark",
        "status",
        "store_timestamp",
        "wrote_bytes",
        "wrote_offset",
    )

    def __init__(
        self,
        status: PutStatus,
        remark: str = "",
        wrote_offset: int = -1,
        wrote_bytes: int = 0,
        queue_offset: int = -1,
        message_count: int = 0,
        store_timestamp: int = 0,
        entries: bytes | bytearray = b"",
        flush_future: Future | asyncio.Future | None = None,
        flush_timeout: float = 5.0,
    ) -> None:
        self.status = status
        self.remark = remark
        self.wrote_offset = wrote_offset
        self.wrote_bytes = wrote_bytes
        self.queue_offset = queue_offset
        self.message_count = message_count
        self.store_timestamp = store_timestamp
        self.entries = entries
        self.flush_future = flush_future
        self.flush_timeout = flush_timeout

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK

    @property
    def offsets(self) -> list[int]:
        """CommitLog offsets of every record written (one for a single put)."""
        return (
            [phys for phys, _, _ in CQ_ENTRY.iter_unpack(self.entries)]
            if self.entries
            else [self.wrote_offset]
        )

    def wait(self) -> PutStatus:
        """Block until the write is durable as configured; PUT_OK or FLUSH_DISK_TIMEOUT."""
        future = self.flush_future
        if future is None or self.status is not PutStatus.PUT_OK:
            return self.status
        if isinstance(future, asyncio.Future):
            raise RuntimeError("this put waits for an event loop's group commit: await durable()")
        try:
            outcome = future.result(self.flush_timeout)
        except FutureTimeout:
            return PutStatus.FLUSH_DISK_TIMEOUT
        return outcome if isinstance(outcome, PutStatus) else PutStatus.PUT_OK

    async def durable(self) -> PutStatus:
        """`wait` for asyncio callers: the event loop keeps running while the disk syncs.

        An asyncio future (a group commit on the event loop) is awaited as it is: whoever made it
        completes it with FLUSH_DISK_TIMEOUT in time, so no timer per put is needed here."""
        future = self.flush_future
        if future is None or self.status is not PutStatus.PUT_OK:
            return self.status
        if isinstance(future, asyncio.Future):
            outcome = await future
        else:
            try:
                outcome = await asyncio.wait_for(asyncio.wrap_future(future), self.flush_timeout)
            except TimeoutError:
                return PutStatus.FLUSH_DISK_TIMEOUT
        return outcome if isinstance(outcome, PutStatus) else PutStatus.PUT_OK

    def __repr__(self) -> str:
        return f"PutResult({self.status.name}, offset={self.wrote_offset}, queue_offset={self.queue_offset})"


class GetResult:
    """Messages found for a pull: the stored bytes as zero-copy slices, plus where to go next.

    Consecutive records are merged into one slice, so `buffers` may hold fewer items than
    `message_count`; joined, they are exactly the PULL_MESSAGE answer body.
    """

    __slots__ = (
        "buffers",
        "max_offset",
        "message_count",
        "min_offset",
        "next_begin_offset",
        "status",
        "total_size",
    )

    def __init__(
        self,
        status: GetStatus,
        next_begin_offset: int,
        min_offset: int,
        max_offset: int,
        buffers: list[memoryview] | None = None,
        message_count: int = 0,
        total_size: int = 0,
    ) -> None:
        self.status = status
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.buffers = buffers or []
        self.message_count = message_count
        self.total_size = total_size

    def __repr__(self) -> str:
        return (
            f"GetResult({self.status.name}, count={self.message_count}, next={self.next_begin_offset}, "
            f"min={self.min_offset}, max={self.max_offset})"
        )
