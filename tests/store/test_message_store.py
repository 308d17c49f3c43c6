"""MessageStore end to end: puts, gets, look-ups, restarts and recovery, all on real files."""

import asyncio
import collections
import shutil
import struct
import threading
import time
from concurrent import futures

import pytest

from ferrymq.protocol.batch import encode_batch
from ferrymq.protocol.hashes import java_hash
from ferrymq.protocol.message_ext import decode_record
from ferrymq.protocol.message_id import offset_msg_id, parse_offset_msg_id
from ferrymq.protocol.sys_flag import TRANSACTION_PREPARED_TYPE
from ferrymq.store import SYNC_FLUSH, GetStatus, MessageStore, PutResult, PutStatus
from ferrymq.store.checkpoint import Checkpoint
from ferrymq.store.files import list_offset_files

from .conftest import props, read_queue, small_config


def put_many(store, topic, queue_id, n, **kw):
    return [store.put_message(topic, queue_id, f"{topic}-{queue_id}-{i}".encode(), **kw) for i in range(n)]


def test_put_then_get_returns_the_stored_records(open_store):
    store = open_store()
    results = [store.put_message("T", 1, f"m{i}".encode(), props(TAGS="A", KEYS=f"k{i}")) for i in range(10)]
    assert all(r.ok for r in results)
    assert [r.queue_offset for r in results] == list(range(10))
    assert store.wait_dispatched()
    got = store.get_messages("T", 1, 0, max_count=32)
    assert got.status is GetStatus.FOUND
    assert (got.message_count, got.next_begin_offset, got.min_offset, got.max_offset) == (10, 10, 0, 10)
    assert len(got.buffers) == 1  # consecutive records come back as one slice
    msgs = read_queue(store, "T", 1)
    assert [m.body for m in msgs] == [f"m{i}".encode() for i in range(10)]
    assert [m.queue_offset for m in msgs] == list(range(10))
    assert [m.commitlog_offset for m in msgs] == [r.wrote_offset for r in results]
    assert msgs[3].properties == {"TAGS": "A", "KEYS": "k3"}


def test_interleaved_queues_come_back_as_separate_slices(open_store):
    store = open_store()
    for i in range(6):
        store.put_message("T", i % 2, f"{i}".encode())
    store.wait_dispatched()
    got = store.get_messages("T", 0, 0)
    assert got.message_count == 3 and len(got.buffers) == 3
    assert [m.body for m in read_queue(store, "T", 0)] == [b"0", b"2", b"4"]


def test_get_status_and_next_offset_follow_rocketmq(open_store):
    store = open_store()
    put_many(store, "T", 0, 5)
    store.wait_dispatched()
    assert store.get_messages("nope", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    one = store.get_messages("T", 0, 5)
    assert (one.status, one.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 5)
    badly = store.get_messages("T", 0, 9)
    assert (badly.status, badly.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 0)
    limited = store.get_messages("T", 0, 1, max_count=2)
    assert (limited.message_count, limited.next_begin_offset) == (2, 3)
    size = len(limited.buffers[0]) // 2
    by_bytes = store.get_messages("T", 0, 0, max_bytes=size * 3 - 1)
    assert by_bytes.message_count == 2  # the third would pass max_bytes
    assert store.get_messages("T", 0, 0, max_bytes=1).message_count == 1  # always at least one


def test_tag_filter_uses_the_consume_queue_hash(open_store):
    store = open_store()
    for i in range(9):
        store.put_message("T", 0, f"{i}".encode(), props(TAGS="ABC"[i % 3]))
    store.put_message("T", 0, b"untagged")
    store.wait_dispatched()
    got = store.get_messages("T", 0, 0, tag_codes={java_hash("B")})
    bodies = [m.body for m in decode_records_all(got)]
    assert bodies == [b"1", b"4", b"7"]
    assert got.next_begin_offset == 10
    none = store.get_messages("T", 0, 0, tag_codes={java_hash("Z")})
    assert (none.status, none.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 10)


def decode_records_all(result):
    from ferrymq.protocol.message_ext import decode_records

    return decode_records(b"".join(result.buffers), verify_crc=True)


def test_segments_roll_over_with_a_blank_tail(open_store):
    store = open_store()
    body = b"x" * 1000
    results = [store.put_message("T", 0, body) for _ in range(200)]  # ~220 KB over 64 KiB segments
    assert all(r.ok for r in results)
    files = list_offset_files(store.config.commitlog_dir)
    assert len(files) >= 4
    assert [p.name for _, p in files][:2] == ["00000000000000000000", "00000000000000065536"]
    first_seg_last = max(r for r in (r.wrote_offset for r in results) if r < 65536)
    tail = first_seg_last + results[0].wrote_bytes
    blank = store.commitlog.read(tail, 8)
    assert blank is not None and struct.unpack(">ii", blank) == (65536 - tail, -875286124)
    store.wait_dispatched()
    assert [m.body for m in read_queue(store, "T", 0)] == [body] * 200


def test_batch_put_writes_one_record_per_entry(open_store):
    store = open_store()
    store.put_message("T", 2, b"before")
    batch = encode_batch([(f"b{i}".encode(), props(UNIQ_KEY=f"U{i}"), i) for i in range(32)])
    result = store.put_batch("T", 2, batch)
    assert result.ok and result.message_count == 32 and result.queue_offset == 1
    assert len(result.offsets) == 32
    store.wait_dispatched()
    msgs = read_queue(store, "T", 2)
    assert [m.body for m in msgs] == [b"before"] + [f"b{i}".encode() for i in range(32)]
    assert [m.flag for m in msgs[1:]] == list(range(32))
    assert [m.commitlog_offset for m in msgs[1:]] == result.offsets
    assert msgs[5].uniq_key == "U4"


def test_bad_input_gets_a_status_not_an_exception(open_store):
    store = open_store(max_message_size=1000)
    big = store.put_message("T", 0, b"x" * 1001)
    assert big.status is PutStatus.MESSAGE_ILLEGAL and "max_message_size" in big.remark
    long_props = store.put_message("T", 0, b"x", b"k\x01" + b"v" * 40000 + b"\x02")
    assert long_props.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
    assert store.put_message("", 0, b"x").status is PutStatus.MESSAGE_ILLEGAL
    assert store.put_message("t" * 256, 0, b"x").status is PutStatus.MESSAGE_ILLEGAL
    assert store.put_batch("T", 0, b"\x00\x00\x00\x05garbage").status is PutStatus.MESSAGE_ILLEGAL
    assert store.put_batch("T", 0, b"").status is PutStatus.MESSAGE_ILLEGAL
    one_too_big = encode_batch([(b"ok", b"", 0), (b"z" * 1001, b"", 0)])
    refused = store.put_batch("T", 0, one_too_big)
    assert refused.status is PutStatus.MESSAGE_ILLEGAL and "max_message_size" in refused.remark
    huge_batch = encode_batch([(b"y" * 900, b"", 0)] * 80)  # over one 64 KiB segment
    assert store.put_batch("T", 0, huge_batch).status is PutStatus.MESSAGE_ILLEGAL
    assert store.get_max_offset("T", 0) == 0


def test_half_transaction_messages_take_no_queue_offset(open_store):
    store = open_store()
    half = store.put_message("T", 0, b"half", sys_flag=TRANSACTION_PREPARED_TYPE)
    normal = store.put_message("T", 0, b"normal")
    assert half.ok and normal.queue_offset == 0
    store.wait_dispatched()
    assert [m.body for m in read_queue(store, "T", 0)] == [b"normal"]
    assert decode_record(store.look_message_by_offset(half.wrote_offset)).body == b"half"


def test_look_up_by_offset_id_and_by_key(open_store):
    store = open_store()
    results = [
        store.put_message("T", 0, f"{i}".encode(), props(KEYS=f"order-{i} shared", UNIQ_KEY=f"U{i}"))
        for i in range(20)
    ]
    store.put_message("Other", 0, b"other", props(KEYS="shared"))
    store.put_message("Thé", 0, b"accents", props(KEYS="clé  ключ\tk"))  # hashed from the stored bytes
    store.wait_dispatched()
    msg_id = offset_msg_id(store.store_host, results[7].wrote_offset)
    _, _, offset = parse_offset_msg_id(msg_id)
    assert decode_record(store.look_message_by_offset(offset)).body == b"7"
    assert store.look_message_by_offset(offset + 1) is None  # not a record boundary
    assert store.look_message_by_offset(10**9) is None
    everything = (0, 2**62)
    assert [decode_record(r).body for r in store.query_message("T", "order-3", 10, *everything)] == [b"3"]
    assert [decode_record(r).body for r in store.query_message("T", "U12", 10, *everything)] == [b"12"]
    assert len(store.query_message("T", "shared", 5, *everything)) == 5
    assert [decode_record(r).body for r in store.query_message("Other", "shared", 50, *everything)] == [
        b"other"
    ]
    for key in ("clé", "ключ", "k"):
        assert [decode_record(r).body for r in store.query_message("Thé", key, 10, *everything)] == [
            b"accents"
        ]
    assert store.query_message("T", "order-3", 10, 0, 1) == []  # outside the time range
    assert store.query_message("T", "nope", 10, *everything) == []


def test_search_offset_by_timestamp(open_store):
    store = open_store()
    for i in range(300):
        store.put_message("T", 0, f"{i}".encode())
    store.wait_dispatched()
    stamps = [m.store_timestamp for m in read_queue(store, "T", 0)]
    for ts in [*sorted(set(stamps)), stamps[0] - 1, stamps[-1] + 1]:
        lower = store.get_offset_in_queue_by_time("T", 0, ts, "lower")
        assert lower == next((i for i, s in enumerate(stamps) if s >= ts), len(stamps))
        upper = store.get_offset_in_queue_by_time("T", 0, ts, "upper")
        assert upper == max([i for i, s in enumerate(stamps) if s <= ts], default=0)
    assert store.get_earliest_message_time("T", 0) == stamps[0]
    assert store.get_earliest_message_time() == stamps[0]
    assert store.get_earliest_message_time("nope", 0) == -1


def test_clean_restart_keeps_everything_and_continues_offsets(open_store):
    store = open_store()
    put_many(store, "T", 0, 50)
    put_many(store, "U", 3, 5)
    store.close()
    again = open_store()
    assert again.recovered_bytes == 0
    assert again.put_message("T", 0, b"next").queue_offset == 50
    again.wait_dispatched()
    assert [m.body for m in read_queue(again, "T", 0)][-2:] == [b"T-0-49", b"next"]
    assert len(read_queue(again, "U", 3)) == 5


def test_a_second_process_cannot_open_the_same_store(open_store):
    from ferrymq.store import MessageStore, StoreError

    store = open_store()
    with pytest.raises(StoreError, match="in use"):
        MessageStore(store.config).open()


def crash_copy(store):
    """Close cleanly, then mark the store as if the process had died mid-run with no checkpoint."""
    store.close()
    (store.root / "abort").touch()
    (store.root / "checkpoint").unlink()
    (store.root / "checkpoint.bak").unlink(missing_ok=True)


def test_recovery_cuts_a_torn_tail(open_store):
    store = open_store()
    results = put_many(store, "T", 0, 30)
    last = results[-1]
    crash_copy(store)
    seg_path = store.config.commitlog_dir / "00000000000000000000"
    with open(seg_path, "r+b") as f:  # zero the last record's second half, as a kill mid-write would
        f.seek(last.wrote_offset + last.wrote_bytes // 2)
        f.write(bytes(last.wrote_bytes - last.wrote_bytes // 2))
    again = open_store()
    assert again.recovered_bytes == last.wrote_offset
    assert [m.body for m in read_queue(again, "T", 0)] == [f"T-0-{i}".encode() for i in range(29)]
    assert again.get_max_offset("T", 0) == 29
    assert again.put_message("T", 0, b"after").queue_offset == 29


def test_recovery_stops_at_a_crc_mismatch(open_store):
    store = open_store()
    results = put_many(store, "T", 0, 30)
    crash_copy(store)
    bad = results[10]
    with open(store.config.commitlog_dir / "00000000000000000000", "r+b") as f:
        f.seek(bad.wrote_offset + bad.wrote_bytes - 10)  # inside the body
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x55]))
    again = open_store()
    msgs = read_queue(again, "T", 0)
    assert [m.body for m in msgs] == [f"T-0-{i}".encode() for i in range(10)]


def test_recovery_rebuilds_deleted_consume_queues_and_index(open_store):
    import shutil

    store = open_store()
    for i in range(40):
        store.put_message(f"T{i % 4}", i % 3, f"{i}".encode(), props(KEYS=f"k{i}"))
    crash_copy(store)
    shutil.rmtree(store.config.consumequeue_dir)
    shutil.rmtree(store.config.index_dir)
    again = open_store()
    assert sum(len(read_queue(again, f"T{t}", q)) for t in range(4) for q in range(3)) == 40
    assert again.wait_dispatched()  # the indexer process rebuilds the index beside the store
    assert [decode_record(r).body for r in again.query_message("T1", "k13", 5, 0, 2**62)] == [b"13"]


def test_sync_flush_acknowledges_after_group_commit(open_store):
    store = open_store(flush_disk_type=SYNC_FLUSH)
    results = []

    def producer(n):
        for i in range(50):
            r = store.put_message("T", n, f"{n}-{i}".encode())
            results.append(r.wait())

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [PutStatus.PUT_OK] * 200
    assert store.commitlog.flushed_offset == store.commitlog.max_offset


async def test_sync_flush_can_be_awaited_without_blocking_the_loop(open_store):
    store = open_store(flush_disk_type=SYNC_FLUSH)
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    statuses = await asyncio.gather(*(store.put_message("T", 0, b"x").durable() for _ in range(100)))
    task.cancel()
    assert statuses == [PutStatus.PUT_OK] * 100
    assert ticks > 0


def test_async_flush_result_is_immediately_final(open_store):
    store = open_store()
    result = store.put_message("T", 0, b"x")
    assert result.flush_future is None and result.wait() is PutStatus.PUT_OK


def test_delete_topic_forgets_its_queues(open_store):
    store = open_store()
    put_many(store, "Gone", 0, 3)
    put_many(store, "Kept", 0, 3)
    store.wait_dispatched()
    store.delete_topic("Gone")
    assert store.get_messages("Gone", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert not (store.config.consumequeue_dir / "Gone").exists()
    assert store.topics() == {"Kept"}
    assert store.put_message("Gone", 0, b"new").queue_offset == 0


def test_a_killed_indexer_is_restarted_by_housekeeping(open_store):
    import os
    import signal
    import time

    store = open_store(flush_interval_consume_queue=100)
    first = store.indexer.proc
    os.kill(first.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while store.indexer.proc is first:  # the checkpoint round notices and starts another
        assert time.monotonic() < deadline, "the dead indexer was never replaced"
        time.sleep(0.02)
    store.put_message("T", 0, b"after", props(KEYS="late-key"))
    assert store.wait_dispatched()
    assert [decode_record(r).body for r in store.query_message("T", "late-key", 5, 0, 2**62)] == [b"after"]


def _consume_queue_bytes(store) -> dict:
    """Every queue's written entries, raw (what pulls and tag filters read)."""
    out = {}
    for cq in store.queues.all():
        raw, offset = b"", cq.min_offset
        while chunk := cq.entries(offset, cq.max_offset - offset):  # one file at a time
            raw += chunk
            offset += len(chunk) // 20
        assert offset == cq.max_offset
        out[(cq.topic, cq.queue_id)] = raw
    return out


def test_entries_built_by_puts_match_a_rebuild_from_the_commitlog(open_store):
    """Puts hand the dispatcher finished ConsumeQueue entries; recovery parses the records instead.
    Both must give the same bytes: tags (in batches too), half transactions, segment roll-overs."""
    import shutil

    store = open_store(mapped_file_size_consume_queue=7 * 20)  # entries of one batch span files
    body = b"x" * 700  # a few records per 64 KiB segment: batches and singles cross roll-overs
    for i in range(30):
        tagged = props(TAGS=f"Tag{i % 3}", UNIQ_KEY=f"u{i}") if i % 2 else props(UNIQ_KEY=f"u{i}")
        store.put_message("T", i % 2, body, tagged)
        store.put_message("T", 0, body, props(TAGS="Half"), sys_flag=TRANSACTION_PREPARED_TYPE)
        batch = encode_batch([(body, props(TAGS=f"B{j}", KEYS="k") if j % 2 else b"", 0) for j in range(5)])
        assert store.put_batch("T", 2 + i % 2, batch).ok
        store.put_message("U", 0, body, props(XTAGS="not-a-tag"))
    store.dispatch()
    built = _consume_queue_bytes(store)
    assert sum(len(v) for v in built.values()) == 20 * (30 * 2 + 30 * 5)
    crash_copy(store)
    shutil.rmtree(store.config.consumequeue_dir)
    again = open_store(mapped_file_size_consume_queue=7 * 20)
    assert _consume_queue_bytes(again) == built


def test_commitlog_warm_up_runs_ahead_of_the_writer_and_writes_nothing(open_store):
    store = open_store(warm_commitlog_ahead=16 * 1024)
    warmer = store.commitlog.warmer
    seg, _ = store.commitlog.writable_segment(100)
    if not seg.populate(0, 4096):
        pytest.skip("this kernel cannot MADV_POPULATE_READ (Linux < 5.14)")
    put_many(store, "T", 0, 20)
    end = store.commitlog.max_offset
    deadline = time.monotonic() + 10
    while warmer._warmed < end + 8 * 1024 and time.monotonic() < deadline:  # woken by the puts
        time.sleep(0.01)
    warmed = warmer._warmed  # read once: the warmer may start another round meanwhile
    assert warmed >= end + 8 * 1024
    assert bytes(seg.view[end - seg.base : warmed - seg.base]) == bytes(warmed - end)
    assert store.wait_dispatched()  # the background dispatcher may not have reached the puts yet
    assert [m.body for m in read_queue(store, "T", 0)] == [f"T-0-{i}".encode() for i in range(20)]


def test_consume_queue_files_take_disk_as_they_fill(tmp_path):
    """A queue's 6 MB file reserves its blocks a step at a time, from one page: thousands of nearly
    empty queues must not fill a disk, and a written entry always has its blocks (no SIGBUS on a
    full disk)."""
    import os

    from ferrymq.store.consumequeue import ENTRY_SIZE, FIRST_RESERVE, RESERVE_STEP, ConsumeQueue

    cq = ConsumeQueue(tmp_path / "cq" / "T" / "0", "T", 0, 300_000 * ENTRY_SIZE)
    cq.prepare()
    (file,) = cq.files

    def allocated() -> int:
        return os.stat(file.path).st_blocks * 512

    assert os.stat(file.path).st_size == 300_000 * ENTRY_SIZE
    assert allocated() <= FIRST_RESERVE
    entries = RESERVE_STEP // ENTRY_SIZE + 10
    cq.put(0, bytes(range(20)) * entries)
    assert RESERVE_STEP < allocated() <= 2 * RESERVE_STEP + ENTRY_SIZE * entries
    assert cq.max_offset == entries


def test_a_cut_tail_not_yet_dispatched_gives_way_to_the_bytes_copied_in_its_place(tmp_path):
    """A demoted master's last puts, cut before they were dispatched, must not be dispatched over
    the records its new master sends for the same offsets (their queue entries were made at put)."""
    master = MessageStore(small_config(tmp_path / "master"), background_dispatch=False).open()
    replica = MessageStore(small_config(tmp_path / "replica"), background_dispatch=False).open()
    try:
        first = replica.put_message("T", 0, b"kept")
        replica.put_message("T", 0, b"cut-" + b"x" * 500)  # never replicated: cut below
        replica.put_message("T", 1, b"cut-too")
        end = first.wrote_offset + first.wrote_bytes
        replica.truncate(end)
        master.put_message("T", 0, b"kept")
        master.put_message("T", 1, b"the master's")
        replica.append_replicated(end, master.read_commitlog(end, master.commitlog.max_offset - end))
        assert replica.dispatch()
        assert [m.body for m in read_queue(replica, "T", 0)] == [b"kept"]
        assert [m.body for m in read_queue(replica, "T", 1)] == [b"the master's"]
    finally:
        master.close()
        replica.close()


def test_consume_queues_with_few_new_entries_wait_for_a_thorough_flush(open_store):
    """Between thorough flushes a ConsumeQueue with less than flush_consume_queue_least_pages of new
    entries is not synced, and the checkpoint keeps the dispatched offset of the last thorough flush:
    entries lost with the page cache are rebuilt from there."""
    store = open_store(flush_interval_consume_queue=20, flush_consume_queue_thorough_interval=3_600_000)
    results = put_many(store, "T", 0, 5)
    assert store.wait_dispatched()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        saved = Checkpoint.load(store.root / "checkpoint")
        if saved is not None and saved.master_flushed_offset > results[-1].wrote_offset:
            break
        time.sleep(0.01)
    assert saved is not None and saved.master_flushed_offset > results[-1].wrote_offset
    assert saved.dispatched_offset <= results[0].wrote_offset  # the position at the open's thorough flush
    root = store.root
    store.close()
    (root / "abort").touch()  # as if the process died after that checkpoint, the queues' pages unsynced
    shutil.rmtree(root / "consumequeue")
    saved.save(root / "checkpoint")
    (root / "checkpoint.bak").unlink(missing_ok=True)
    again = open_store()
    assert [m.body for m in read_queue(again, "T", 0)] == [f"T-0-{i}".encode() for i in range(5)]


def test_a_thorough_flush_moves_the_checkpoint_past_every_entry(open_store):
    store = open_store(flush_interval_consume_queue=20, flush_consume_queue_thorough_interval=0)
    results = put_many(store, "T", 0, 5)
    assert store.wait_dispatched()
    end = results[-1].wrote_offset + results[-1].wrote_bytes
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        saved = Checkpoint.load(store.root / "checkpoint")
        if saved is not None and saved.dispatched_offset >= end:
            break
        time.sleep(0.01)
    assert saved is not None and saved.dispatched_offset >= end


def test_close_lets_a_put_under_way_finish_and_refuses_every_later_one(tmp_path):
    """Puts racing close never touch a closed CommitLog: each is stored (and found after reopening)
    or refused with a clear status, as is any put or replicated write after close."""
    from ferrymq.store.errors import StoreError

    store = MessageStore(small_config(tmp_path / "store")).open()
    results: list = []
    errors: list[BaseException] = []

    def put_until_refused() -> None:
        try:
            for i in range(200_000):  # bounded; refused once the store closes
                result = store.put_message("T", 0, f"m{i}".encode() * 20)
                results.append(result)
                if not result.ok:
                    return
        except BaseException as e:
            errors.append(e)

    putters = [threading.Thread(target=put_until_refused) for _ in range(3)]
    for t in putters:
        t.start()
    deadline = time.monotonic() + 30
    while len(results) < 500 and time.monotonic() < deadline:
        time.sleep(0.001)
    store.close()
    for t in putters:
        t.join(30)
    assert errors == []
    refused = [r for r in results if not r.ok]
    assert len(refused) == len(putters)
    assert all(r.status is PutStatus.SERVICE_NOT_AVAILABLE and "closed" in r.remark for r in refused)
    late = store.put_message("T", 0, b"late")
    assert late.status is PutStatus.SERVICE_NOT_AVAILABLE and "is closed" in late.remark
    batch = store.put_batch("T", 0, encode_batch([(b"late", b"", 0)]))
    assert batch.status is PutStatus.SERVICE_NOT_AVAILABLE
    with pytest.raises(StoreError, match="is closed"):
        store.append_replicated(store.commitlog.max_offset, b"late")
    with MessageStore(small_config(tmp_path / "store")) as again:
        assert again.wait_dispatched()
        assert len(read_queue(again, "T", 0)) == len(results) - len(refused)


def close_under_puts(store: MessageStore, puts_first: int) -> list[PutResult]:
    """Four threads put into `store` until it refuses them, not waiting for their answers, while
    this one closes it once they have made `puts_first` puts; every put made, once they end."""
    results: list[PutResult] = []
    errors: list[BaseException] = []
    started = threading.Barrier(5)

    def producer(n: int) -> None:
        started.wait()
        try:
            for i in range(100_000):  # until the store refuses
                results.append(result := store.put_message("T", n, b"%d" % i))
                if not result.ok:
                    return
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=producer, args=(n,), daemon=True) for n in range(4)]
    for t in threads:
        t.start()
    started.wait()
    deadline = time.monotonic() + 10
    while len(results) < puts_first and time.monotonic() < deadline:
        time.sleep(0.001)
    store.close()
    for t in threads:
        t.join(5)
    assert not any(t.is_alive() for t in threads) and not errors, errors
    return results


def test_puts_racing_close_from_other_threads_end_promptly(tmp_path):
    """A put whose group commit is asked for while another thread closes the store is answered at
    once: durable (the close's last flush covered it) or the store-closed refusal, never left to
    wait out its flush timeout."""
    closed, ok = PutStatus.SERVICE_NOT_AVAILABLE, PutStatus.PUT_OK
    seen: collections.Counter[tuple[PutStatus, PutStatus]] = collections.Counter()
    for round_ in range(10):
        config = small_config(tmp_path / f"s{round_}", flush_disk_type=SYNC_FLUSH, sync_flush_timeout=60_000)
        results = close_under_puts(MessageStore(config).open(), 50 * round_)
        durable = [r.flush_future for r in results if r.flush_future is not None]
        assert not futures.wait(durable, timeout=5).not_done  # none waits for its flush timeout
        seen.update((r.status, r.wait()) for r in results)
    assert set(seen) <= {(ok, ok), (ok, closed), (closed, closed)}, seen
    assert seen[ok, ok] and seen[closed, closed]
