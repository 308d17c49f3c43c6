"""The CommitLog: every message of every topic, appended to fixed-size segment files.

Segments are named by the 20-digit offset of their first byte. A record never spans two segments:
when one does not fit, the segment's tail becomes a blank record and writing moves on to the next.
Only one thread appends (callers hold the store's put lock); readers get memoryview slices.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from ferrymq.protocol.record import BLANK_MIN_SIZE, write_blank
from ferrymq.store.errors import StoreError
from ferrymq.store.files import MappedFile, list_offset_files, offset_name, zero_range

log = logging.getLogger(__name__)


class CommitLog:
    def __init__(self, directory: Path, segment_size: int, warm_ahead: int = 0) -> None:
        self.directory = directory
        self.segment_size = segment_size
        directory.mkdir(parents=True, exist_ok=True)
        self.segments: list[MappedFile] = []
        for base, path in list_offset_files(directory):
            if base % segment_size:
                raise StoreError(f"{path} does not start on a segment boundary of {segment_size} bytes")
            if self.segments and base != self.segments[-1].end:
                raise StoreError(f"CommitLog segment missing before {path}")
            self.segments.append(MappedFile(path, base, segment_size, create=False))
        # The write position; set for real by recovery, which knows where valid data ends.
        self.max_offset = self.segments[0].base if self.segments else 0
        self.flushed_offset = self.max_offset
        self.warmer = _Warmer(self, warm_ahead) if warm_ahead > 0 else None

    @property
    def min_offset(self) -> int:
        return self.segments[0].base if self.segments else self.max_offset

    def segment_for(self, offset: int) -> MappedFile | None:
        segments = self.segments  # one read: the cleaner may replace the list concurrently
        if not segments or offset < segments[0].base:
            return None
        index = (offset - segments[0].base) // self.segment_size
        return segments[index] if index < len(segments) else None

    def writable_segment(self, need: int) -> tuple[MappedFile, int]:
        """The segment and position where `need` bytes go next, rolling to a new segment if needed.

        `need` must not exceed the segment size less a blank record's minimum size.
        """
        offset = self.max_offset
        warmer = self.warmer
        if warmer is not None and offset + need > warmer.wake_at:
            warmer.wake()
        segments = self.segments
        seg = segments[-1] if segments else None  # writing goes on in the last segment
        if seg is None or not seg.base <= offset < seg.end:
            seg = self.segment_for(offset)
        if seg is not None:
            pos = offset - seg.base
            room = seg.size - pos
            if need + BLANK_MIN_SIZE <= room:
                return seg, pos
            write_blank(seg.mm, pos, room)
            offset = self.max_offset = seg.end
        seg = MappedFile(self.directory / offset_name(offset), offset, self.segment_size, create=True)
        self.segments = [*self.segments, seg]
        return seg, 0

    def raw_window(self, offset: int, size: int) -> memoryview:
        """The mapped bytes where up to `size` bytes copied from another CommitLog go at `offset`, the
        write position, cut at the segment's end: a replica reads its socket straight into them.
        They become part of the log only by `commit_raw`.

        Replication keeps two logs byte-identical this way; the copied bytes may end inside a record.
        The next segment is created when `offset` is where one begins, and an empty log starts at
        any segment boundary (the master may have deleted older segments).
        """
        if not self.segments and offset % self.segment_size == 0:
            self.max_offset = self.flushed_offset = offset
        if offset != self.max_offset:
            raise StoreError(
                f"replicated bytes for offset {offset} but the CommitLog ends at {self.max_offset}"
            )
        seg = self.segment_for(offset)
        if seg is None:
            seg = MappedFile(self.directory / offset_name(offset), offset, self.segment_size, create=True)
            self.segments = [*self.segments, seg]
        pos = offset - seg.base
        return seg.view[pos : min(pos + size, seg.size)]

    def commit_raw(self, end: int) -> None:
        """The bytes written through `raw_window` up to `end` are now the log's."""
        self.max_offset = end
        warmer = self.warmer
        if warmer is not None and end > warmer.wake_at:  # a replica's pages are warmed ahead too
            warmer.wake()

    def read(self, offset: int, size: int) -> memoryview | None:
        """A zero-copy slice of `size` bytes at `offset`, or None if that range is not stored."""
        seg = self.segment_for(offset)
        if seg is None or offset + size > min(self.max_offset, seg.end):
            return None
        pos = offset - seg.base
        return seg.view[pos : pos + size]

    def flush(self) -> int:
        """fdatasync every segment holding unflushed bytes; return the new flushed offset."""
        target = self.max_offset
        for seg in self.unflushed_segments(target):
            seg.sync()
        return self.flushed(target)

    def unflushed_segments(self, target: int) -> list[MappedFile]:
        """The segments holding bytes between the flushed offset and `target`, in order."""
        segments = []
        offset = self.flushed_offset
        while offset < target:
            seg = self.segment_for(offset)
            if seg is None:
                break
            segments.append(seg)
            offset = min(seg.end, target)
        return segments

    def flushed(self, target: int) -> int:
        """Record that everything below `target` is on disk; return the flushed offset."""
        self.flushed_offset = max(self.flushed_offset, target)
        return self.flushed_offset

    def truncate(self, offset: int) -> None:
        """Drop everything from `offset` on (recovery cuts a torn tail here)."""
        keep = [s for s in self.segments if s.base < offset or (s.base == offset == self.min_offset)]
        for seg in self.segments[len(keep) :]:
            seg.destroy()
        self.segments = keep
        tail = self.segment_for(offset)
        if tail is not None and offset < tail.end:
            # Stale bytes past the cut could later line up with new records and look valid.
            zero_range(tail.fd, offset - tail.base, tail.end - offset)
        self.max_offset = offset
        self.flushed_offset = min(self.flushed_offset, offset)

    def delete_segment(self, seg: MappedFile) -> None:
        self.segments = [s for s in self.segments if s is not seg]
        seg.destroy()

    def close(self) -> None:
        if self.warmer is not None:
            self.warmer.stop()
        for seg in self.segments:
            seg.close()
        self.segments = []


class _Warmer:
    """Faults in the next `ahead` bytes of the CommitLog before the writer reaches them.

    A write to a fresh page of a mapped segment traps into the kernel, which allocates the page and
    marks the file's reserved blocks written: under batched puts that was half the put thread's CPU.
    This thread asks for most of that work in bulk (MappedFile.populate) on the other core, like
    RocketMQ's warmMappedFile, but without writing: pages past the write position only, no data.
    """

    def __init__(self, commitlog: CommitLog, ahead: int) -> None:
        self.commitlog = commitlog
        self.ahead = ahead
        self.wake_at = -1  # the writer wakes us once it writes past here
        self._warmed = -1  # CommitLog offset up to which the pages are in
        self._event = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="ferrymq-warm", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self.wake_at = 1 << 62  # once is enough until this round is done
        self._event.set()

    def stop(self) -> None:
        self._stopping = True
        self._event.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stopping:
            self._event.wait()
            self._event.clear()
            if self._stopping:
                return
            offset = self.commitlog.max_offset
            seg = self.commitlog.segment_for(offset)
            if seg is None:
                self.wake_at = offset  # nothing mapped there yet: try again on the next write
                continue
            start = max(offset, self._warmed, seg.base) // _PAGE * _PAGE
            end = min(offset + self.ahead, seg.end)
            if start < end and not self._populate(seg, start - seg.base, end - start):
                return
            self._warmed = end
            self.wake_at = end - self.ahead // 2 if end < seg.end else seg.end

    def _populate(self, seg: MappedFile, pos: int, length: int) -> bool:
        if seg.populate(pos, length) or seg.fd < 0:
            return True  # done, or the segment closed meanwhile: the next round finds the current one
        log.info("CommitLog warm-up unavailable here; the writer faults pages in itself")
        return False


_PAGE = 4096
