"""MessageStore: the storage engine's one public face (RocketMQ's DefaultMessageStore).

Puts append RocketMQ records to the CommitLog under one lock; the dispatcher thread turns them into
ConsumeQueue and index entries; gets answer with zero-copy slices of the mapped segments. Background
threads flush (periodically, or per group commit with SYNC_FLUSH), write the checkpoint and enforce
retention. Recovery after a crash replays the CommitLog from the checkpoint through the dispatcher.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import shutil
import struct
import threading
import time
from collections import deque
from typing import cast

from ferrymq._native import load
from ferrymq.protocol.batch import batch_records_size, scan_batch, write_batch_records
from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.hashes import tag_hash
from ferrymq.protocol.properties import MAX_PROPERTIES_SIZE, find_property
from ferrymq.protocol.record import (
    BLANK,
    BLANK_MIN_SIZE,
    POS_SYSFLAG,
    host_sys_flags,
    pack_host,
    read_record_meta,
    record_size,
    store_timestamp_pos,
    topic_block,
    write_record,
)
from ferrymq.protocol.sys_flag import (
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from ferrymq.store.checkpoint import Checkpoint
from ferrymq.store.cleanup import RetentionService
from ferrymq.store.commitlog import CommitLog
from ferrymq.store.config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
from ferrymq.store.consumequeue import BLANK_ENTRY_SIZE, ENTRY, ConsumeQueueTable
from ferrymq.store.dispatch import Dispatcher, Prepared, scan_segment
from ferrymq.store.entries import DLEDGER_DIR, divided_of, entry_scan
from ferrymq.store.errors import DiskFullError, StoreError
from ferrymq.store.files import MappedFile
from ferrymq.store.flush import FlushService
from ferrymq.store.group_commit import group_commit
from ferrymq.store.index import IndexService
from ferrymq.store.indexer import IndexerProcess
from ferrymq.store.status import GetResult, GetStatus, PutResult, PutStatus

log = logging.getLogger(__name__)

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
MAX_TOPIC_BYTES = 255
_TAGS = b"TAGS\x01"
_NO_QUEUE_OFFSET = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
_new_prepared = tuple.__new__  # a Prepared without its Python-level __new__: one per put


def py_append(
    buf, pos: int, base: int, block: bytes, queue_id: int, flag: int, sys_flag: int, born_timestamp: int,
    born_host: bytes, now: int, store_host: bytes, reconsume_times: int, prepared_transaction_offset: int,
    body: bytes | memoryview, properties: bytes, queue_offsets: dict[tuple[str, int], int],
    key: tuple[str, int] | None, tags_code: int | None, prepared: deque[Prepared],
    prepared_cls: type[Prepared], topic: str,
) -> int:  # fmt: skip
    """One message's record written at `pos` of a segment starting at CommitLog offset `base`, its
    queue offset taken from `queue_offsets` (none if `key` is None: half and rolled-back
    transaction messages) and its ConsumeQueue entry prepared for the dispatcher, with `tags_code`
    or (None) the hash of its TAGS; the queue offset. The reference of the C `append` the put path
    calls (with `now` the store time, ms)."""
    phys = base + pos
    queue_offset = queue_offsets.get(key, 0) if key is not None else 0
    size = write_record(
        buf, pos, block, queue_id, flag, queue_offset, phys, sys_flag, born_timestamp or now, born_host, now,
        store_host, reconsume_times, prepared_transaction_offset, body, properties,
    )  # fmt: skip
    if key is not None:
        queue_offsets[key] = queue_offset + 1
        if tags_code is None:
            tag = find_property(properties, _TAGS) if _TAGS in properties else None
            tags_code = tag_hash(tag) if tag else 0
        entry = ENTRY.pack(phys, size, tags_code)
    else:
        entry = b""
    prepared.append(
        _new_prepared(prepared_cls, (phys, phys + size, topic, queue_id, queue_offset, entry, now))
    )
    return queue_offset


_native = load("put")
append = py_append if _native is None else _native.append


class MessageStore:
    def __init__(
        self,
        config: StoreConfig,
        store_host: tuple[str, int] = ("127.0.0.1", 10911),
        *,
        background_dispatch: bool = True,
    ) -> None:
        """`background_dispatch=False` leaves calling `dispatch()` after puts to the owner: a broker
        does it on its event loop, which spares a GIL handoff per write and wakes long polls at once.
        With SYNC_FLUSH, a store opened on an event loop must take its puts on that loop: their group
        commit runs on it (store/group_commit.py).

        A store whose `dledger/divided` file says so is DLedger's single log: from that offset on,
        its CommitLog holds DLedger entries (store/entries.py), the Raft log (ha/dledger/) recovers
        their tail and deletes their segments, and only committed ones are dispatched."""
        self.entries_from: int | None = None
        self.config = config
        self._thorough_at = 0.0  # when ConsumeQueues were last flushed whole (see _checkpoint) ...
        self._queues_durable = (0, 0)  # ... and the store timestamp and dispatched offset they then had
        self.background_dispatch = background_dispatch
        self.store_host = pack_host(*store_host)
        self.root = config.store_path_root_dir
        self.disk_full = False
        self.replica = False  # a replica's log is its master's copy: it takes no puts (RocketMQ's SLAVE)
        self._put_lock = threading.Lock()
        self._queue_offsets: dict[tuple[str, int], int] = {}
        self._topic_blocks: dict[str, bytes] = {}
        self._max_body = config.max_message_size
        # the V6 bits of a record's sys flag, by the width of its packed born host
        self._host_flags = {w: host_sys_flags(b"\0" * w, self.store_host) for w in (8, 20)}
        # Record bytes besides body, topic block and properties, by born host width.
        self._fixed_size = {w: record_size(0, 0, 0, w, len(self.store_host)) - 3 for w in (8, 20)}
        self._opened = False

    # ---------------------------------------------------------------- life cycle

    def open(self) -> MessageStore:
        """Load the store, recover it if the last run did not stop cleanly, and start its services."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise StoreError(f"store {self.root} is in use by another process") from None
        abort = self.root / "abort"
        clean = not abort.exists()
        started = time.monotonic()
        self.commitlog = CommitLog(
            self.config.commitlog_dir,
            self.config.mapped_file_size_commit_log,
            self.config.warm_commitlog_ahead,
        )
        self.queues = ConsumeQueueTable(
            self.config.consumequeue_dir, self.config.mapped_file_size_consume_queue
        )
        self.index = (
            IndexService(
                self.config.index_dir,
                max_hash_slot_num=self.config.max_hash_slot_num,
                max_index_num=self.config.max_index_num,
            )
            if self.config.message_index_enable
            else None
        )
        checkpoint = Checkpoint.load(self.root / "checkpoint")
        self.indexer: IndexerProcess | None = None
        self.recovered_bytes = self._recover(checkpoint, clean)
        self.recovery_seconds = time.monotonic() - started
        abort.touch()
        self.retention = RetentionService(
            self.config, disk_usage=self.disk_usage_ratio, disk_full=self._set_disk_full,
            deletable=self._retired_segments, delete_segment=self._delete_segment,
            min_offset=lambda: self.commitlog.min_offset, delete_below=self._delete_files_below,
            resume=self._resume_dispatch,
        )  # fmt: skip
        cfg = self.config
        flush_period = cfg.flush_interval_commit_log / 1000 if cfg.flush_disk_type == ASYNC_FLUSH else None
        self.flush_service = FlushService({
            "commitlog": (flush_period, self.commitlog.flush),
            "checkpoint": (cfg.flush_interval_consume_queue / 1000, self._periodic_checkpoint),
            "retention": (cfg.clean_resource_interval / 1000, self.retention.run),
        })  # fmt: skip
        self.group_commit = (
            group_commit(self.commitlog, cfg.sync_flush_timeout / 1000)
            if cfg.flush_disk_type == SYNC_FLUSH
            else None
        )
        self._start_dispatch_thread()
        self.flush_service.start()
        if self.group_commit:
            self.group_commit.start()
        self._opened = True
        return self

    def _recover(self, checkpoint: Checkpoint | None, clean: bool) -> int:
        cl = self.commitlog
        start = cl.min_offset
        if checkpoint is not None:
            last_end = cl.segments[-1].end if cl.segments else start
            start = min(max(checkpoint.dispatched_offset, cl.min_offset), last_end)
        self.dispatcher = Dispatcher(cl, self.queues, start)
        divided = self.entries_from = divided_of(self.root / DLEDGER_DIR)
        if self.index is not None:  # it rebuilds the index while the scan below rebuilds ConsumeQueues
            self.indexer = self._start_indexer(committed=start)
        if divided is not None:
            recovered = self._recover_entries(start, divided)
        elif clean and checkpoint is not None and self._ends_cleanly_at(start):
            cl.max_offset = cl.flushed_offset = start
            recovered = 0
        else:
            if cl.segments:
                log.warning("store %s was not shut down cleanly: recovering from offset %d", self.root, start)
            cl.max_offset = start
            progress = self.indexer.committed if self.indexer is not None else None
            end = self.dispatcher.recover(self.config.check_crc_on_recover, progress)
            if cl.segments:
                cl.truncate(end)
            for cq in self.queues.all():
                cq.truncate_from_commitlog(end)
            recovered = end - start
        for cq in self.queues.all():
            cq.correct_min_offset(cl.min_offset)
        self._reload_queue_offsets()
        self._checkpoint(flush_all=True)
        if self.indexer is not None:
            self.indexer.committed(cl.max_offset)
        return recovered

    def _recover_entries(self, start: int, divided: int) -> int:
        """DLedger's single log: dispatch again only what was dispatched before the stop (those
        entries were committed; the commit index is not persisted, so later ones wait for the
        leader's), and leave the CommitLog's tail to the Raft log's recovery."""
        until = max(start, self.hold_entries(divided))
        self.commitlog.max_offset = start
        end = self.dispatcher.recover(self.config.check_crc_on_recover, until=until)
        for cq in self.queues.all():
            cq.truncate_from_commitlog(end)
        self.commitlog.max_offset = end
        return end - start

    def hold_entries(self, divided: int) -> int:
        """From `divided` on the CommitLog holds DLedger entries (the Raft log decides where when it
        is first opened on a classic CommitLog: the next segment boundary)."""

        def scan(buf, pos, end, stop, base, verify_crc, tag_hash_of):
            walk = entry_scan if base >= divided else scan_segment
            return walk(buf, pos, end, stop, base, verify_crc, tag_hash_of)

        self.entries_from = divided
        self.dispatcher.scan = scan
        if self.indexer is not None:
            self.indexer.hold_entries(divided)
        return divided

    @property
    def visible_offset(self) -> int:
        """The CommitLog's end as readers see it: all of it, or a single log's committed entries."""
        limit = self.dispatcher.limit
        cl_max = self.commitlog.max_offset
        return cl_max if self.entries_from is None or limit is None else min(limit, cl_max)

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the next put to topic/queue takes."""
        return self._queue_offsets.get((topic, queue_id), 0)

    def reload_queue_offsets(self) -> None:
        """Continue each queue's offsets from its ConsumeQueue: a DLedger leader's store, once every
        earlier entry is dispatched (puts it proposed and lost may have taken offsets)."""
        with self._put_lock:
            self._reload_queue_offsets()

    def _reload_queue_offsets(self) -> None:
        """Continue each queue's offsets from its ConsumeQueue (after recovery, truncation, replication)."""
        self._queue_offsets = {(cq.topic, cq.queue_id): cq.max_offset for cq in self.queues.all()}

    def _start_indexer(self, committed: int) -> IndexerProcess:
        """Start the indexer; it may index up to `committed`, where the CommitLog is known valid."""
        cfg = self.config
        return IndexerProcess(
            self.root, cfg.max_hash_slot_num, cfg.max_index_num, cfg.mapped_file_size_commit_log,
            committed, self.commitlog.min_offset, self.entries_from, self._index_cap,
        )  # fmt: skip

    def _index_cap(self) -> int | None:
        """A single log's entries are indexed once committed (dispatched), never before."""
        return self.dispatcher.offset if self.entries_from is not None else None

    def check_indexer(self) -> None:
        """Restart the indexer if it died (queries by key would go stale otherwise)."""
        if self.indexer is not None and not self.indexer.alive() and self._opened:
            log.error("the indexer process exited (code %s); restarting it", self.indexer.proc.returncode)
            self.indexer.position.close()
            self.indexer = self._start_indexer(committed=self.commitlog.max_offset)

    def _ends_cleanly_at(self, offset: int) -> bool:
        """After a clean stop nothing may follow the checkpointed end: the next int is zero."""
        seg = self.commitlog.segment_for(offset)
        return seg is None or _INT.unpack_from(seg.mm, offset - seg.base)[0] == 0

    def _start_dispatch_thread(self) -> None:
        self._dispatch_wake = threading.Event()
        self._dispatch_idle = False
        self._stopping = False
        self._dispatch_thread = threading.Thread(
            target=self._dispatch_loop, name="ferrymq-reput", daemon=True
        )
        if self.background_dispatch:
            self._dispatch_thread.start()

    def dispatch(self) -> int:
        """Build ConsumeQueue entries for everything written so far (see `background_dispatch`); a
        single log's indexer follows what was dispatched.

        When the disk has no room for them, writes are refused until retention's next pass finds
        it has (`_resume_dispatch`): the CommitLog would otherwise outrun its queues."""
        count = self.dispatcher.dispatch()
        if count and self.entries_from is not None and self.indexer is not None:
            self.indexer.committed(self.dispatcher.offset)
        if self.dispatcher.stalled is not None and not self.disk_full:
            self.retention.check_disk()
        return count

    def _resume_dispatch(self) -> int | None:
        """Retry a dispatch the full disk held up; the CommitLog offset where it still waits, or None."""
        if self.dispatcher.stalled is not None:
            self.dispatch()
        return self.dispatcher.offset if self.dispatcher.stalled is not None else None

    def _dispatch_loop(self) -> None:
        while not self._stopping:
            seen = self.commitlog.max_offset
            try:
                self.dispatch()
            except StoreError:
                log.exception("dispatch stopped")
                return
            self._dispatch_idle = True
            if self.commitlog.max_offset != seen:
                self._dispatch_idle = False  # a put slipped in between: go round again
                continue
            self._dispatch_wake.wait()
            self._dispatch_wake.clear()
            self._dispatch_idle = False

    def close(self) -> None:
        """Stop cleanly: dispatch and flush everything, checkpoint, and remove the abort marker."""
        if not self._opened:
            return
        with self._put_lock:  # a put under way finishes first; later ones are refused (`_place`)
            self._opened = False
        self._stopping = True
        self._dispatch_wake.set()
        if self.background_dispatch:
            self._dispatch_thread.join()
        self.flush_service.stop()
        if self.group_commit:
            self.group_commit.stop()
        self.dispatcher.dispatch()
        self._checkpoint(flush_all=True)
        if self.indexer is not None:
            self.indexer.committed(self.commitlog.max_offset)
            self.indexer.stop()
        (self.root / "abort").unlink(missing_ok=True)
        self.commitlog.close()
        self.queues.close()
        if self.index is not None:
            self.index.close()
        os.close(self._lock_fd)

    def __enter__(self) -> MessageStore:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def _checkpoint(self, *, flush_all: bool = False) -> None:
        """Flush CommitLog, then ConsumeQueues and index, then record how far all of it is durable.

        As RocketMQ's: between thorough passes a ConsumeQueue is flushed only once it has
        flush_consume_queue_least_pages of new entries (thousands of queues taking a message a second
        would cost thousands of fdatasyncs a second), and the checkpoint keeps the ConsumeQueue
        position of the last thorough pass, from which recovery rebuilds them. DLedger's single log
        makes every pass thorough: that position is its only record of what was committed, so recovery
        dispatches nothing past it (a member would hide what consumers had seen until a leader's
        commit reached it again)."""
        cfg, now = self.config, time.monotonic()
        dispatched = self.dispatcher.offset
        ts = self.dispatcher.last_store_timestamp
        flushed = self.commitlog.flush()
        thorough = (
            flush_all
            or self.entries_from is not None
            or now - self._thorough_at >= cfg.flush_consume_queue_thorough_interval / 1000
        )
        least = 0 if thorough else cfg.flush_consume_queue_least_pages
        for cq in self.queues.all():
            cq.flush(everything=flush_all, least_pages=least)
        if thorough:
            self._thorough_at, self._queues_durable = now, (ts, min(dispatched, flushed))
        logics_ts, durable = self._queues_durable
        Checkpoint(ts, logics_ts, ts, flushed, flushed, durable).save(self.root / "checkpoint")

    # ---------------------------------------------------------------- writes

    def _refusal(self, topic: str, body_len: int, props_len: int) -> PutResult | None:
        """Why a message cannot be stored (replica, disk full, bad topic, too big), or None if it can."""
        if self.replica:
            return PutResult(
                PutStatus.SERVICE_NOT_AVAILABLE, f"store {self.root} is a replica: it takes no writes"
            )
        if self.disk_full:
            return PutResult(PutStatus.DISK_FULL, f"disk full: store {self.root} refuses writes")
        if self._topic_block(topic) is None:
            return PutResult(
                PutStatus.MESSAGE_ILLEGAL, f"topic must be 1 to {MAX_TOPIC_BYTES} bytes of UTF-8"
            )
        if body_len > self.config.max_message_size:
            return PutResult(
                PutStatus.MESSAGE_ILLEGAL,
                f"message body is {body_len} bytes, over max_message_size {self.config.max_message_size}",
            )
        if props_len > MAX_PROPERTIES_SIZE:
            return PutResult(
                PutStatus.PROPERTIES_SIZE_EXCEEDED,
                f"properties are {props_len} bytes, over the limit of {MAX_PROPERTIES_SIZE}",
            )
        return None

    def _topic_block(self, topic: str) -> bytes | None:
        """The topic's encoded length and bytes, cached; None for a topic a record cannot hold."""
        block = self._topic_blocks.get(topic)
        if block is None:
            raw = topic.encode(errors="replace")
            if not 0 < len(raw) <= MAX_TOPIC_BYTES:
                return None
            block = self._topic_blocks[topic] = topic_block(raw)
        return block

    def put_message(
        self,
        topic: str,
        queue_id: int,
        body: bytes | memoryview,
        properties: bytes | str = b"",
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: bytes | None = None,
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        tags_code: int | None = None,
    ) -> PutResult:
        """Append one message. `properties` is the encoded properties string; hosts are packed.
        `tags_code`: the ConsumeQueue tag hash, when the caller knows it (else found in TAGS).
        Positional-friendly: the send path calls it once per message."""
        if isinstance(properties, str):
            properties = properties.encode()
        block = self._topic_blocks.get(topic)
        if (
            block is None
            or self.disk_full
            or self.replica
            or len(body) > self._max_body
            or len(properties) > MAX_PROPERTIES_SIZE
        ):
            refused = self._refusal(topic, len(body), len(properties))
            if refused:
                return refused
            block = self._topic_blocks[topic]
        store_host = self.store_host
        if born_host is None:
            born_host = store_host
        width = len(born_host)
        sys_flag = (sys_flag & ~0x30) | self._host_flags[width]
        size = self._fixed_size[width] + len(body) + len(block) + 2 + len(properties)
        # Half and rolled-back transaction messages never reach a ConsumeQueue, so take no offset.
        takes_offset = (sys_flag & TRANSACTION_TYPE_MASK) not in _NO_QUEUE_OFFSET
        key = (topic, queue_id) if takes_offset else None
        with self._put_lock:
            placed = self._place(size)
            if placed.__class__ is PutResult:
                return placed
            seg, pos = placed
            now = time.time_ns() // 1_000_000
            queue_offset = append(
                seg.mm, pos, seg.base, block, queue_id, flag, sys_flag, born_timestamp, born_host, now,
                store_host, reconsume_times, prepared_transaction_offset, body, properties,
                self._queue_offsets, key, tags_code, self.dispatcher.prepared, Prepared, topic,
            )  # fmt: skip
            phys = seg.base + pos
            self.commitlog.max_offset = phys + size
        return self._written(PutResult(PutStatus.PUT_OK, "", phys, size, queue_offset, 1, now))

    def put_batch(
        self,
        topic: str,
        queue_id: int,
        batch_body: bytes | memoryview,
        *,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: bytes | None = None,
    ) -> PutResult:
        """Append a SEND_BATCH_MESSAGE body: each entry becomes its own record, offsets consecutive."""
        try:
            count, largest_body, largest_props = scan_batch(batch_body)
        except MessageDecodeError as e:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, f"bad batch body: {e}")
        if not count:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, "empty batch")
        refused = self._refusal(topic, largest_body, largest_props)
        if refused:
            return refused
        block = self._topic_blocks[topic]
        born_host = born_host or self.store_host
        sys_flag = (sys_flag & ~0x30) | host_sys_flags(born_host, self.store_host)
        total = batch_records_size(len(batch_body), count, block, born_host, self.store_host)
        key = (topic, queue_id)
        with self._put_lock:
            placed = self._place(total)
            if placed.__class__ is PutResult:
                return placed
            seg, pos = placed
            first = seg.base + pos
            queue_offset = self._queue_offsets.get(key, 0)
            now = time.time_ns() // 1_000_000
            entries = write_batch_records(
                seg.mm, pos, batch_body, count, block, queue_id, queue_offset, first, sys_flag,
                born_timestamp or now, born_host, now, self.store_host,
            )  # fmt: skip
            self._queue_offsets[key] = queue_offset + count
            self.dispatcher.prepared.append(
                _new_prepared(Prepared, (first, first + total, topic, queue_id, queue_offset, entries, now))
            )
            self.commitlog.max_offset = first + total
        return self._written(PutResult(PutStatus.PUT_OK, "", first, total, queue_offset, count, now, entries))

    def _place(self, size: int):
        """Where `size` bytes go next, or a PutResult saying why they cannot be written (the caller
        holds the put lock)."""
        if not self._opened:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, f"store {self.root} is closed")
        if size + BLANK_MIN_SIZE > self.config.mapped_file_size_commit_log:
            return PutResult(
                PutStatus.MESSAGE_ILLEGAL, f"a {size}-byte record does not fit in a CommitLog segment"
            )
        try:
            return self.commitlog.writable_segment(size)
        except DiskFullError as e:
            self.disk_full = True
            log.error("%s; refusing writes until space is freed", e)
            return PutResult(PutStatus.DISK_FULL, str(e))
        except StoreError as e:
            log.error("cannot create CommitLog segment: %s", e)
            return PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED, str(e))

    def _written(self, result: PutResult) -> PutResult:
        if self._dispatch_idle:
            self._dispatch_wake.set()
        if self.indexer is not None:
            self.indexer.committed(self.commitlog.max_offset)
        if self.group_commit is not None:
            result.flush_future = self.group_commit.request(result.wrote_offset + result.wrote_bytes)
            result.flush_timeout = self.config.sync_flush_timeout / 1000
        return result

    def wait_dispatched(self, timeout: float = 10.0) -> bool:
        """Block until everything written so far has ConsumeQueue and index entries (tests, tools)."""
        target = dispatch_target = self.commitlog.max_offset
        if not self.background_dispatch or self.dispatcher.limit is not None:
            self.dispatch()
        if self.dispatcher.limit is not None and self.dispatcher.limit < target:
            dispatch_target = self.dispatcher.offset  # as far as it may go now
        if self.indexer is not None:
            self.indexer.committed(target)  # also a blank tail left by a failed roll-over
        if self.entries_from is not None:  # a single log's uncommitted entries are not indexed yet
            target = dispatch_target
        deadline = time.monotonic() + timeout
        while self.dispatcher.offset < dispatch_target or (
            self.indexer and self.indexer.indexed_offset < target
        ):
            if time.monotonic() > deadline:
                return False
            self._dispatch_wake.set()
            time.sleep(0.001)
        return True

    # ---------------------------------------------------------------- replication

    def read_commitlog(self, offset: int, max_bytes: int) -> memoryview | None:
        """Stored CommitLog bytes from `offset`, at most `max_bytes` and never past a segment's end
        (what a master streams to replicas): a zero-copy slice, empty at the write position, None
        where nothing is stored (before the oldest segment or past the end)."""
        cl = self.commitlog
        if offset == cl.max_offset:
            return memoryview(b"")
        seg = cl.segment_for(offset)
        if seg is None or offset > cl.max_offset:
            return None
        end = min(cl.max_offset, seg.end, offset + max_bytes)
        return seg.view[offset - seg.base : end - seg.base]

    def append_replicated(self, offset: int, data: bytes | memoryview) -> None:
        """Append bytes copied from the master at `offset`, this store's write position (the end of
        `data` may fall inside a record). The owner dispatches afterwards, as after a put."""
        size = len(data)
        window = self.replica_window(offset, size)
        if len(window) < size:
            raise StoreError(f"replicated bytes at {offset} cross the end of a CommitLog segment")
        window[:] = data
        self.replicated(offset + size)

    def replica_window(self, offset: int, size: int) -> memoryview:
        """The mapped CommitLog bytes where up to `size` bytes copied from the master at `offset` (this
        store's write position) go, cut at a segment's end; `replicated` then appends them."""
        with self._put_lock:
            self._check_open()
            empty = not self.commitlog.segments
            window = self.commitlog.raw_window(offset, size)
            if empty:
                self.dispatcher.offset = offset
            return window

    def _check_open(self) -> None:
        """StoreError for a write to the CommitLog after `close` (the caller holds the put lock)."""
        if not self._opened:
            raise StoreError(f"store {self.root} is closed")

    def replicated(self, end: int) -> None:
        """The bytes written into `replica_window`s up to `end` are appended; the owner dispatches
        afterwards, as after a put."""
        with self._put_lock:
            self._check_open()
            self.commitlog.commit_raw(end)
        if self._dispatch_idle:
            self._dispatch_wake.set()
        if self.indexer is not None:
            self.indexer.committed(end)

    def truncate(self, offset: int) -> None:
        """Cut the CommitLog at `offset` (a record boundary), with the ConsumeQueue entries and index
        progress after it: a replica drops the tail its new master never had."""
        with self._put_lock, self.dispatcher.lock:
            self._check_open()
            self.commitlog.truncate(offset)
            for cq in self.queues.all():
                cq.truncate_from_commitlog(offset)
            self.dispatcher.cut(offset)
            self._reload_queue_offsets()
        self._checkpoint(flush_all=True)
        if self.indexer is not None:  # restart it from the cut: it may have indexed past it
            self.indexer.committed(offset)
            self.indexer.stop()
            self.indexer = self._start_indexer(committed=offset)
        log.warning("store %s truncated to offset %d", self.root, offset)

    def settle_replicated_tail(self) -> int:
        """Before a replica takes writes: dispatch what it copied (all of it, confirmed or not: its
        log is the group's now), cut a last record it only copied in part, and continue queue offsets
        from its ConsumeQueues. Returns the write position."""
        self.dispatcher.limit = None
        self.dispatcher.dispatch()
        if self.dispatcher.offset < self.commitlog.max_offset:
            self.truncate(self.dispatcher.offset)
        with self._put_lock:
            self._reload_queue_offsets()
        return self.commitlog.max_offset

    # ---------------------------------------------------------------- reads

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        max_bytes: int = 256 * 1024,
        tag_codes: set[int] | frozenset[int] | None = None,
    ) -> GetResult:
        """Read up to `max_count` messages (and about `max_bytes`) from a queue, starting at `offset`.

        `tag_codes` holds the Java hashes of the wanted tags (None: every message). Status and next
        offset follow RocketMQ's getMessage, so the broker maps them to pull codes directly.
        """
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_offset, max_offset = cq.min_offset, cq.max_offset
        if max_offset == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
        if offset < min_offset:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
        if offset == max_offset:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
        if offset > max_offset:
            # RocketMQ sends the client back to the start if the queue never lost anything, else to the end.
            return GetResult(
                GetStatus.OFFSET_OVERFLOW_BADLY, max_offset if min_offset else 0, min_offset, max_offset
            )

        cl = self.commitlog
        cl_min = cl.min_offset
        buffers: list[memoryview | None] = []
        count = total = 0
        run_start = run_end = -1
        removed = filtered = False
        next_offset = offset
        budget = max(16000 // 20, max_count * 20)  # entries to scan when a filter rejects most
        full = False
        while not full and next_offset < max_offset and budget > 0:
            chunk = cq.entries(next_offset, budget)
            if not chunk:
                break
            budget -= len(chunk) // 20
            for phys, size, tag in ENTRY.iter_unpack(chunk):
                if size == BLANK_ENTRY_SIZE or phys < cl_min:
                    removed = removed or size != BLANK_ENTRY_SIZE
                    next_offset += 1
                    continue
                if count and (total + size > max_bytes):
                    full = True
                    break
                if tag_codes is not None and tag not in tag_codes:
                    filtered = True
                    next_offset += 1
                    continue
                if phys != run_end:
                    if run_end > 0:
                        buffers.append(cl.read(run_start, run_end - run_start))
                    run_start = phys
                run_end = phys + size
                count += 1
                total += size
                next_offset += 1
                if count >= max_count:
                    full = True
                    break
        if run_end > 0:
            buffers.append(cl.read(run_start, run_end - run_start))
        if count:
            if any(b is None for b in buffers):  # retention removed a segment under us
                return GetResult(GetStatus.MESSAGE_WAS_REMOVING, offset, cq.min_offset, max_offset)
            status = GetStatus.FOUND
        elif removed:
            status = GetStatus.MESSAGE_WAS_REMOVING
        elif filtered:
            status = GetStatus.NO_MATCHED_MESSAGE
        else:
            status = GetStatus.OFFSET_FOUND_NULL
        found = cast(list[memoryview], buffers)  # no None left: checked above when there are any
        return GetResult(status, next_offset, min_offset, max_offset, found, count, total)

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        """The next logical offset of a queue (its entry count), as GET_MAX_OFFSET answers."""
        cq = self.queues.get(topic, queue_id)
        return cq.max_offset if cq else 0

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get(topic, queue_id)
        return cq.min_offset if cq else 0

    def look_message_by_offset(self, commitlog_offset: int) -> memoryview | None:
        """The stored record at a CommitLog offset (from an offset message id), or None if none is there."""
        seg = self.commitlog.segment_for(commitlog_offset)
        if seg is None or commitlog_offset >= self.commitlog.max_offset:
            return None
        pos = commitlog_offset - seg.base
        meta = read_record_meta(seg.mm, pos, min(self.commitlog.max_offset, seg.end) - seg.base)
        if meta is None or meta is BLANK or meta.physical_offset != commitlog_offset:
            return None
        return seg.view[pos : pos + meta.size]

    def _store_timestamp_at(self, commitlog_offset: int) -> int:
        seg = self.commitlog.segment_for(commitlog_offset)
        if seg is None:
            return -1
        pos = commitlog_offset - seg.base
        sys_flag = _INT.unpack_from(seg.mm, pos + POS_SYSFLAG)[0]
        return _LONG.unpack_from(seg.mm, pos + store_timestamp_pos(sys_flag))[0]

    def get_offset_in_queue_by_time(
        self, topic: str, queue_id: int, timestamp: int, boundary: str = "lower"
    ) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: "lower" gives the first offset stored at or after `timestamp`
        (the max offset if none); "upper" the last offset stored at or before it (the min if none).
        """
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset  # binary search for the first entry stored >= / > ts
        upper = boundary == "upper"
        while lo < hi:
            mid = (lo + hi) // 2
            entry = cq.entry(mid)
            ts = self._store_timestamp_at(entry[0]) if entry and entry[1] != BLANK_ENTRY_SIZE else -1
            if ts < timestamp or (upper and ts == timestamp):
                lo = mid + 1
            else:
                hi = mid
        return max(lo - 1, cq.min_offset) if upper else lo

    def get_message_store_timestamp(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """Store time of the message at a queue offset (RocketMQ's getMessageStoreTimeStamp); -1: none."""
        cq = self.queues.get(topic, queue_id)
        entry = cq.entry(queue_offset) if cq else None
        if entry is None or entry[1] == BLANK_ENTRY_SIZE:
            return -1
        return self._store_timestamp_at(entry[0])

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int = 0) -> int:
        """Store time of the oldest retained message: of one queue, or of the whole CommitLog. -1: none."""
        if topic is None:
            offset = self.commitlog.min_offset
            return self._store_timestamp_at(offset) if offset < self.commitlog.max_offset else -1
        cq = self.queues.get(topic, queue_id)
        entry = cq.entry(cq.min_offset) if cq else None
        return self._store_timestamp_at(entry[0]) if entry else -1

    def query_message(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> list[memoryview]:
        """Messages of `topic` whose KEYS or UNIQ_KEY equal `key`, stored within [begin_ms, end_ms]."""
        if self.index is None:
            return []
        self.index.refresh()
        wanted = key.encode()
        found = []
        for phys in self.index.query(topic, key, max_num * 2, begin_ms, end_ms):
            record = self.look_message_by_offset(phys)
            if record is None:
                continue
            raw = bytes(record)  # a look-up, not a hot path: a copy keeps bytes.find at hand
            meta = read_record_meta(raw, 0, len(raw))
            if meta is None or meta is BLANK or meta.topic != topic:
                continue
            props = raw[meta.props_start : meta.props_end]
            uniq = find_property(props, b"UNIQ_KEY\x01")
            keys = find_property(props, b"KEYS\x01") or b""
            if uniq == wanted or wanted in keys.split():
                found.append(record)
                if len(found) >= max_num:
                    break
        return found

    def topics(self) -> set[str]:
        return {topic for topic, _ in self.queues.queues}

    def prepare_topic(self, topic: str, queue_nums: int) -> None:
        """Create the topic's ConsumeQueue files now (a queue declared ahead of its messages): their
        first messages then cost no file creation on the dispatch path."""
        with self.dispatcher.lock:
            for queue_id in range(queue_nums):
                self.queues.get_or_create(topic, queue_id).prepare()

    def delete_topic(self, topic: str) -> None:
        """Forget a topic's queues (its records stay in the CommitLog until retention removes them)."""
        with self._put_lock:
            self.dispatcher.dispatch()  # so no record of the topic is left to re-create its queues
            with self.dispatcher.lock:
                self._queue_offsets = {k: v for k, v in self._queue_offsets.items() if k[0] != topic}
                self.queues.remove_topic(topic)

    # ---------------------------------------------------------------- maintenance

    def _periodic_checkpoint(self) -> None:
        self._checkpoint()
        self.check_indexer()

    def _set_disk_full(self, usage: float, full: bool) -> None:
        """Retention's disk check: refuse writes past the warning level, or while dispatch waits for
        room; take them again once neither holds."""
        full = full or self.dispatcher.stalled is not None
        if full != self.disk_full:
            if full:
                log.error("disk %.1f%% used, over %d%%: refusing writes", usage,
                          self.config.disk_space_warning_level_ratio)  # fmt: skip
            else:
                log.warning("disk %.1f%% used: accepting writes again", usage)
        self.disk_full = full

    def _retired_segments(self, undispatched: bool = False) -> list[MappedFile]:
        """CommitLog segments retention may delete, oldest first: wholly dispatched (or, asked for
        `undispatched`, not), and never the segment being written."""
        if self.entries_from is not None:  # the Raft log deletes its segments itself (trim)
            return []
        if undispatched:
            return self.commitlog.segments[:-1]
        dispatched = self.dispatcher.offset
        return list(itertools.takewhile(lambda seg: seg.end <= dispatched, self.commitlog.segments[:-1]))

    def trimmed(self) -> None:
        """A single log's Raft log deleted CommitLog segments (its retention): the ConsumeQueue and
        index files wholly below the new minimum follow."""
        self._delete_files_below(self.commitlog.min_offset)

    def _delete_segment(self, seg: MappedFile) -> None:
        with self._put_lock:
            if seg.end <= self.dispatcher.offset:  # dispatch has left it for good
                self.commitlog.delete_segment(seg)
                return
            with self.dispatcher.lock:  # dispatch is in it or before it: it goes on after it
                self.commitlog.delete_segment(seg)
                self.dispatcher.skip_to(seg.end)

    def _delete_files_below(self, min_offset: int) -> None:
        """ConsumeQueue and index files wholly below the CommitLog's new minimum follow its segments."""
        with self.dispatcher.lock:
            for cq in self.queues.all():
                cq.delete_files_below(min_offset)
        if self.indexer is not None:  # it deletes its files below this and unmaps deleted segments
            self.indexer.min_offset(min_offset)

    def disk_usage_ratio(self) -> float:
        """Percentage of the store's file system in use."""
        st = os.statvfs(self.root)
        return 100.0 * (st.f_blocks - st.f_bfree) / st.f_blocks if st.f_blocks else 0.0

    def destroy(self) -> None:
        """Delete the whole store directory (the store must be closed)."""
        if self._opened:
            raise StoreError("close the store before destroying it")
        shutil.rmtree(self.root, ignore_errors=True)
