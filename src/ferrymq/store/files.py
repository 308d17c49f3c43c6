"""Durable file helpers: atomic small-file writes and fixed-size memory-mapped files."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

from ferrymq.store.errors import DiskFullError, StoreError


def io_error(action: str, path: Path, e: OSError) -> StoreError:
    if e.errno == errno.ENOSPC:
        return DiskFullError(f"disk full while trying to {action} {path}")
    return StoreError(f"could not {action} {path}: {e.strerror or e}")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new content, never a mix.

    The previous content is kept as `<name>.bak`, as RocketMQ keeps its config files.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            os.replace(path, path.with_name(path.name + ".bak"))
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as e:
        raise io_error("write", path, e) from None


def durable_copies(path: Path) -> Iterator[tuple[Path, bytes]]:
    """The copies of a file written by atomic_write, newest first: the file, then its `.bak`.

    Readers take the first copy that parses: a crash mid-replace or a damaged file leaves the
    previous content one step back.
    """
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            yield candidate, candidate.read_bytes()
        except FileNotFoundError:
            continue


CREATING_SUFFIX = ".creating"


class MappedFile:
    """One fixed-size file mapped into memory: a CommitLog segment or a ConsumeQueue file.

    `base` is the offset of the file's first byte in its log (the number in its name). Writers use
    `mm` directly; readers take slices of `view`, which stay valid even after the file is destroyed
    (Linux keeps an unlinked mapping alive until the last slice is dropped).
    """

    __slots__ = ("_address", "base", "fd", "mm", "path", "reserved", "size", "view")

    def __init__(self, path: Path, base: int, size: int, *, create: bool, reserve: int | None = None) -> None:
        """`reserve`: bytes whose disk blocks a new file gets at once (default: all of it); files
        mostly left empty (ConsumeQueues) reserve the rest as they fill (`reserve_to`)."""
        self.path = path
        self.base = base
        self.size = size
        self.reserved = 0  # bytes from the start known to have their blocks
        # A new file is built under a temporary name and renamed when whole, so a crash mid-way
        # never leaves a short file under a real name.
        opened = path.with_name(path.name + CREATING_SUFFIX) if create else path
        try:
            if create:
                opened.unlink(missing_ok=True)
            self.fd = os.open(opened, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o644)
        except OSError as e:
            raise io_error("create" if create else "open", path, e) from None
        try:
            if create:
                # Reserve the blocks now: a full disk then fails here, not as a SIGBUS mid-write.
                self.reserved = size if reserve is None else min(reserve, size)
                os.ftruncate(self.fd, size)
                if self.reserved:
                    os.posix_fallocate(self.fd, 0, self.reserved)
            elif os.fstat(self.fd).st_size != size:
                raise StoreError(f"{path} is {os.fstat(self.fd).st_size} bytes, expected {size}")
            self.mm = mmap.mmap(self.fd, size)
            if create:
                os.rename(opened, path)
        except OSError as e:
            os.close(self.fd)
            if create:
                opened.unlink(missing_ok=True)
            raise io_error("map", path, e) from None
        except StoreError:
            os.close(self.fd)
            raise
        self.view = memoryview(self.mm)
        self._address = 0

    def populate(self, pos: int, length: int) -> bool:
        """Fault [pos, pos + length) in with one call (MADV_POPULATE_READ; the GIL is released).

        The pages get allocated and mapped now, so a later first write there takes only a light
        write-protect fault instead of a full one. They are not dirtied, so nothing extra reaches
        the disk. False where the kernel cannot (before Linux 5.14) or the file is closed.
        """
        if _madvise is None or self.fd < 0:
            return False
        if not self._address:
            try:
                self._address = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
            except (ValueError, TypeError, BufferError):
                return False
        start = pos // _PAGE * _PAGE
        return _madvise(self._address + start, min(pos + length, self.size) - start, _MADV_POPULATE_READ) == 0

    @property
    def end(self) -> int:
        return self.base + self.size

    def reserve_to(self, position: int, step: int) -> None:
        """Make sure the blocks up to `position` exist, reserving `step` bytes more at a time (a full
        disk is then a DiskFullError here, never a SIGBUS when the mapping is written)."""
        if position <= self.reserved:
            return
        end = min(self.size, max(position, self.reserved + step))
        try:
            os.posix_fallocate(self.fd, self.reserved, end - self.reserved)
        except OSError as e:
            raise io_error("reserve space in", self.path, e) from None
        self.reserved = end

    def sync(self) -> None:
        """fdatasync the file: flushes pages written through the mapping without holding the GIL."""
        fd = self.fd
        if fd < 0:
            return  # closed meanwhile (a flush thread racing a deletion): nothing left to sync
        try:
            os.fdatasync(fd)
        except OSError:
            if self.fd >= 0:
                raise

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd < 0:
            return
        self.view.release()
        with contextlib.suppress(BufferError):  # readers hold slices: the mapping goes with the last
            self.mm.close()
        os.close(fd)

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


_MADV_POPULATE_READ = 22  # Linux 5.14
_PAGE = mmap.PAGESIZE


def _load_madvise():
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


_madvise = _load_madvise()

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)


def zero_range(fd: int, start: int, length: int) -> None:
    """Make a file range read as zeros, cheaply: punch a hole, then reserve the blocks again.

    Falls back to writing zeros where the file system cannot punch holes. Mappings of the file see
    the zeros at once (Linux keeps one page cache for both).
    """
    if length <= 0:
        return
    if _libc.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, start, length) == 0:
        os.posix_fallocate(fd, start, length)
        return
    chunk = bytes(1 << 20)
    end = start + length
    while start < end:
        start += os.pwrite(fd, chunk[: min(len(chunk), end - start)], start)


def offset_name(offset: int) -> str:
    """RocketMQ's 20-digit zero-padded file name for a start offset."""
    return f"{offset:020d}"


def list_offset_files(directory: Path) -> list[tuple[int, Path]]:
    """The 20-digit-named files of a directory, sorted by their start offset.

    Files whose creation a crash interrupted are deleted on the way: they never held data.
    """
    if not directory.is_dir():
        return []
    found = []
    for p in directory.iterdir():
        if p.name.endswith(CREATING_SUFFIX):
            p.unlink(missing_ok=True)
        elif p.name.isdigit() and len(p.name) == 20:
            found.append((int(p.name), p))
    return sorted(found)
