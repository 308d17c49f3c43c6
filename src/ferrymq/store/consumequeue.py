"""ConsumeQueue: the per topic/queue index into the CommitLog, 20 bytes per message.

Entry n (the message's logical queue offset) lives at byte n*20 of the queue's files and holds the
record's CommitLog offset (int64), size (int32) and tag hash (int64). Files are fixed-size and
named by the byte offset of their first entry. Entries are only ever written by the dispatcher.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ferrymq.protocol.record import CQ_ENTRY as ENTRY
from ferrymq.store.errors import StoreError
from ferrymq.store.files import MappedFile, io_error, list_offset_files, offset_name

ENTRY_SIZE = ENTRY.size  # 20
BLANK_ENTRY_SIZE = 0x7FFFFFFF  # size field of a hole-filling entry (offset 0, tag 0)
# Disk blocks a ConsumeQueue file takes ahead of its entries: a queue holds few messages as often as
# many, and a 6 MB file reserved whole per queue would fill a disk with thousands of queues. A new
# file takes one page (204 entries); a filling one doubles what it has, up to RESERVE_STEP at a time.
FIRST_RESERVE = 4096
RESERVE_STEP = 64 * 1024
_BLANK_ENTRY = ENTRY.pack(0, BLANK_ENTRY_SIZE, 0)
_PAGE = 4096  # what flush_consume_queue_least_pages counts


class ConsumeQueue:
    def __init__(self, directory: Path, topic: str, queue_id: int, file_size: int) -> None:
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.per_file = file_size // ENTRY_SIZE
        self.files: list[MappedFile] = []
        for base, path in list_offset_files(directory):
            if base % file_size:
                raise StoreError(f"{path} does not start on a ConsumeQueue file boundary")
            self.files.append(MappedFile(path, base, file_size, create=False))
        self.min_offset = self.files[0].base // ENTRY_SIZE if self.files else 0
        self.max_offset = self._find_end()
        self._flushed_offset = self.max_offset

    def _find_end(self) -> int:
        """The logical offset after the last written entry (entries are written in order)."""
        while self.files:
            last = self.files[-1]
            lo, hi = 0, self.per_file  # invariant: entries [0, lo) are written, [hi, end) are not
            while lo < hi:
                mid = (lo + hi) // 2
                if ENTRY.unpack_from(last.mm, mid * ENTRY_SIZE)[1] != 0:
                    lo = mid + 1
                else:
                    hi = mid
            if lo or len(self.files) == 1:
                return last.base // ENTRY_SIZE + lo
            self.files.pop().destroy()  # an empty trailing file: drop it
        return self.min_offset

    def _file_for(self, offset: int) -> MappedFile | None:
        files = self.files
        if files:
            index = (offset * ENTRY_SIZE - files[0].base) // self.file_size
            if 0 <= index < len(files):
                return files[index]
        return None

    def _writable_file(self, offset: int) -> MappedFile:
        """The file holding entry `offset`, created if the queue has not reached it yet."""
        mf = self._file_for(offset)
        if mf is not None:
            return mf
        base = offset * ENTRY_SIZE // self.file_size * self.file_size
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise io_error("create", self.directory, e) from None
        mf = MappedFile(
            self.directory / offset_name(base), base, self.file_size, create=True, reserve=FIRST_RESERVE
        )
        self.files = [*self.files, mf]
        if len(self.files) == 1:
            self.min_offset = base // ENTRY_SIZE
        return mf

    def prepare(self) -> None:
        """Create the file the next entry goes to, if it is not there yet, and fault in its page
        (writing the zero that is there): the first message's dispatch then costs neither."""
        mf = self._writable_file(self.max_offset)
        position = self.max_offset * ENTRY_SIZE - mf.base
        mf.reserve_to(position + ENTRY_SIZE, _step(mf))
        mf.mm[position] = 0

    def put(self, queue_offset: int, entries: bytes | bytearray) -> None:
        """Write raw entries (ENTRY each) from `queue_offset` on; re-dispatching rewrites them in place.

        The put path builds a whole batch's entries at once, so they land here in one copy.
        """
        if queue_offset > self.max_offset:  # fill a gap so offsets stay positional
            self._write(self.max_offset, _BLANK_ENTRY * (queue_offset - self.max_offset))
        self._write(queue_offset, entries)
        end = queue_offset + len(entries) // ENTRY_SIZE
        if end > self.max_offset:
            self.max_offset = end

    def _write(self, queue_offset: int, entries: bytes | bytearray) -> None:
        data = memoryview(entries)
        while data:
            mf = self._writable_file(queue_offset)
            start = queue_offset * ENTRY_SIZE - mf.base
            n = min(len(data), mf.size - start)
            if start + n > mf.reserved:
                mf.reserve_to(start + n, _step(mf))
            mf.mm[start : start + n] = data[:n]
            data = data[n:]
            queue_offset += n // ENTRY_SIZE

    def entries(self, offset: int, max_count: int) -> memoryview:
        """Up to `max_count` raw entries starting at `offset`, from one file (callers loop for more)."""
        mf = self._file_for(offset)
        if mf is None:
            return memoryview(b"")
        start = offset * ENTRY_SIZE - mf.base
        count = min(max_count, self.max_offset - offset, (mf.size - start) // ENTRY_SIZE)
        return mf.view[start : start + max(count, 0) * ENTRY_SIZE]

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        mf = self._file_for(offset) if self.min_offset <= offset < self.max_offset else None
        return ENTRY.unpack_from(mf.mm, offset * ENTRY_SIZE - mf.base) if mf else None

    def last_entry(self) -> tuple[int, int, int] | None:
        return self.entry(self.max_offset - 1)

    def truncate_from_commitlog(self, commitlog_end: int) -> None:
        """Drop entries that point at or past `commitlog_end` (a CommitLog tail cut by recovery)."""
        while self.max_offset > self.min_offset:
            last = self.last_entry()
            if last is None or (last[1] != BLANK_ENTRY_SIZE and last[0] + last[1] <= commitlog_end):
                break
            self.max_offset -= 1
            mf = self._writable_file(self.max_offset)  # it exists: last_entry() just read it
            ENTRY.pack_into(mf.mm, self.max_offset * ENTRY_SIZE - mf.base, 0, 0, 0)
            self._flushed_offset = min(self._flushed_offset, self.max_offset)
        while self.files and self.files[-1].base // ENTRY_SIZE >= max(self.max_offset, self.min_offset + 1):
            self._forget(self.files[-1])

    def correct_min_offset(self, commitlog_min: int) -> None:
        """Move min_offset past entries whose messages retention has already deleted."""
        offset = self.min_offset
        while offset < self.max_offset:
            entry = self.entry(offset)
            if entry is None or (entry[0] >= commitlog_min and entry[1] != BLANK_ENTRY_SIZE):
                break
            offset += 1
        self.min_offset = offset

    def delete_files_below(self, commitlog_min: int) -> int:
        """Delete whole files whose every message lies below the CommitLog's min offset."""
        deleted = 0
        while len(self.files) > 1:
            first = self.files[0]
            last_in_file = first.base // ENTRY_SIZE + self.per_file - 1
            entry = ENTRY.unpack_from(first.mm, (self.per_file - 1) * ENTRY_SIZE)
            if last_in_file >= self.max_offset or entry[0] >= commitlog_min:
                break
            self._forget(first)
            deleted += 1
        if self.files:
            self.min_offset = max(self.min_offset, self.files[0].base // ENTRY_SIZE)
        self.correct_min_offset(commitlog_min)
        return deleted

    def _forget(self, mf: MappedFile) -> None:
        self.files = [f for f in self.files if f is not mf]
        mf.destroy()

    def flush(self, *, everything: bool = False, least_pages: int = 0) -> None:
        """fdatasync the files holding entries written since the last flush (or all of them), once
        those span `least_pages` pages or more.

        Entries are written in order, so [flushed offset, max offset) is exactly what is new;
        recovery, which rewrites older entries, asks for everything.
        """
        end = self.max_offset
        start = self.min_offset if everything else self._flushed_offset
        if start >= end and not everything:
            return
        if (
            least_pages
            and not everything
            and (end * ENTRY_SIZE) // _PAGE - (start * ENTRY_SIZE) // _PAGE < least_pages
        ):
            return
        for mf in self.files:
            if mf.end > start * ENTRY_SIZE and mf.base <= end * ENTRY_SIZE:
                mf.sync()
        self._flushed_offset = end

    def close(self) -> None:
        for mf in self.files:
            mf.close()
        self.files = []

    def destroy(self) -> None:
        for mf in self.files:
            mf.destroy()
        self.files = []
        self.min_offset = self.max_offset = 0


class ConsumeQueueTable:
    """Every ConsumeQueue of the store, keyed by (topic, queue id), loaded from `consumequeue/`."""

    def __init__(self, root: Path, file_size: int) -> None:
        self.root = root
        self.file_size = file_size
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        root.mkdir(parents=True, exist_ok=True)
        for topic_dir in root.iterdir():
            for queue_dir in topic_dir.iterdir() if topic_dir.is_dir() else ():
                if queue_dir.name.isdigit():
                    key = (topic_dir.name, int(queue_dir.name))
                    self.queues[key] = ConsumeQueue(queue_dir, key[0], key[1], file_size)

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(self.root / topic / str(queue_id), topic, queue_id, self.file_size)
            self.queues = {**self.queues, (topic, queue_id): cq}  # copy-on-write for readers
        return cq

    def all(self) -> list[ConsumeQueue]:
        return list(self.queues.values())

    def remove_topic(self, topic: str) -> None:
        doomed = [cq for key, cq in self.queues.items() if key[0] == topic]
        self.queues = {key: cq for key, cq in self.queues.items() if key[0] != topic}
        for cq in doomed:
            cq.destroy()
            _rmdir_quietly(cq.directory)
        _rmdir_quietly(self.root / topic)

    def close(self) -> None:
        for cq in self.all():
            cq.close()


def _step(mf: MappedFile) -> int:
    """How much more a file reserves when its entries outgrow its blocks: as much as it has."""
    return min(RESERVE_STEP, max(FIRST_RESERVE, mf.reserved))


def _rmdir_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):  # not empty or already gone: nothing to tidy
        path.rmdir()
