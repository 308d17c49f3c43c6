"""DLedger's single log: Raft entries in the CommitLog's segments. The bytes are DLedger's layout at
positions every member computes alike, the answers are the memory log's, a torn tail is recovered,
and a classic CommitLog stays as a prefix (no process is killed: crashes are cut files)."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from ferrymq.ha.dledger import entry as codec
from ferrymq.ha.dledger.command import PutCommand
from ferrymq.ha.dledger.commitlog_log import CommitLogRaftLog
from ferrymq.ha.dledger.log import Entry, EntryRefused
from ferrymq.ha.dledger.messages import Append, AppendResponse
from ferrymq.ha.dledger.single import write_entry_body
from ferrymq.protocol.message_ext import decode_record
from ferrymq.protocol.record import BLANK, pack_host, read_record_meta, record_size, topic_block, write_record
from ferrymq.store import MessageStore, PutResult, StoreConfig
from ferrymq.store.checkpoint import Checkpoint
from ferrymq.store.commitlog import CommitLog
from ferrymq.store.consumequeue import ConsumeQueueTable
from ferrymq.store.dispatch import Dispatcher
from ferrymq.store.entries import entry_scan
from ferrymq.store.errors import StoreError
from tests.ha.dledger.test_filelog import entries, like_the_memory_log, same
from tests.ha.dledger.test_raft import CFG, Net
from tests.store.conftest import read_queue

SEGMENT = 4096
HOST = pack_host("127.0.0.1", 10911)


class Opened:
    """A CommitLog and the Raft log in it, as a member opens them; `reopen` is a restart."""

    def __init__(self, root: Path, segment: int = SEGMENT) -> None:
        self.root, self.segment = root, segment
        self.open()

    def open(self) -> None:
        self.commitlog = CommitLog(self.root / "commitlog", self.segment)
        self.log = CommitLogRaftLog(self.root / "dledger", self.commitlog)

    def close(self) -> None:
        self.log.close()
        self.commitlog.close()

    def reopen(self) -> CommitLogRaftLog:
        self.close()
        self.open()
        return self.log

    def segment_file(self, base: int) -> Path:
        return self.root / "commitlog" / f"{base:020d}"


def all_entries(log) -> list[Entry]:
    out: list[Entry] = []
    while len(out) < log.last_index + 1 - log.first_index:
        out += log.read(log.first_index + len(out), 1 << 30, 1 << 62)
    return out


def test_entries_are_dledger_layout_in_commitlog_segments_with_a_blank_before_a_roll(tmp_path):
    o = Opened(tmp_path)
    big = [Entry(i, 1, bytes([i]) * 1000) for i in range(5)]  # 1048 bytes each: 3 fit in 4096
    o.log.append([*big, Entry(5, 2, b"", codec.MAGIC_NOOP)])
    data = o.segment_file(0).read_bytes() + o.segment_file(SEGMENT).read_bytes()
    chain, pos = 0, 0
    for i in range(6):
        if i == 3:  # the segment's tail is a DLedger blank, the entry starts the next segment
            assert struct.unpack_from(">ii", data, pos) == (codec.MAGIC_BLANK, SEGMENT - pos)
            pos = SEGMENT
        h, body = codec.decode(data, pos)
        assert (h.index, h.pos, h.chain_crc) == (i, pos, codec.chain_crc(chain, h.body_crc))
        assert bytes(body) == (bytes(big[i].body) if i < 5 else b"")
        units = (tmp_path / "dledger" / f"{(pos // SEGMENT) * SEGMENT:020d}.index").read_bytes()
        assert codec.decode_index(units, (i - (0 if i < 3 else 3)) * 32) == (h.magic, pos, h.size, i, h.term)
        pos, chain = pos + h.size, h.chain_crc
    assert o.commitlog.max_offset == pos and h.magic == codec.MAGIC_NOOP


@pytest.mark.parametrize("segment", [1 << 20, 512])
def test_it_answers_like_the_memory_log_through_appends_truncations_and_reopening(tmp_path, segment):
    o = Opened(tmp_path, segment)
    _, mem = like_the_memory_log(random.Random(7), o.log, lambda _: o.reopen(), 120, 400)
    assert same(all_entries(o.reopen()), mem.entries)
    with pytest.raises(codec.EntryError):
        o.log.append([Entry(o.log.last_index + 1, 9, bytes(segment))])


def positions(o: Opened) -> list[int]:
    """Each entry's position, from its header in the CommitLog."""
    out, pos = [], o.log.divided
    while pos < o.commitlog.max_offset:
        seg = o.commitlog.segment_for(pos)
        assert seg is not None
        if struct.unpack_from(">i", seg.mm, pos - seg.base)[0] == codec.MAGIC_BLANK:
            pos = seg.end
            continue
        h = codec.decode_header(seg.mm, pos - seg.base)
        out.append(h.pos)
        pos += h.size
    return out


def test_an_entry_lands_where_every_member_puts_it_after_a_cut_or_a_torn_roll(tmp_path):
    """Positions depend on the entries before alone: a big entry that rolled the segment, then was
    cut (a diverged tail) or lost in a crash (its blank kept), leaves no blank behind, so the small
    entry that replaces it goes where a member that never had it puts it."""
    ref, cut, torn = (Opened(tmp_path / n) for n in ("ref", "cut", "torn"))
    head = entries(0, 1, 3, size=1000)
    for o in (ref, cut, torn):
        o.log.append(head)
    for o in (cut, torn):
        o.log.append([Entry(3, 1, bytes(1500))])  # does not fit: a blank, then the next segment
    assert positions(cut)[-1] == SEGMENT
    cut.log.truncate(3)
    torn.close()
    os.truncate(torn.segment_file(SEGMENT), 0)  # the new segment was lost, the blank was written
    os.truncate(torn.segment_file(SEGMENT), SEGMENT)
    torn.open()
    assert torn.log.last_index == 2 and torn.commitlog.max_offset == positions(ref)[-1] + 1050
    for o in (ref, cut, torn):
        o.log.append([Entry(3, 2, b"small")])
    assert positions(ref) == positions(cut) == positions(torn) and positions(ref)[-1] < SEGMENT


def test_recovery_cuts_a_torn_tail_and_indexes_entries_whose_units_were_lost(tmp_path):
    o = Opened(tmp_path)
    o.log.append(entries(0, 1, 6, size=300))  # 6 x 350 bytes, all in the first segment
    o.log.sync()
    o.close()
    index = tmp_path / "dledger" / f"{0:020d}.index"
    os.truncate(index, 2 * 32)  # units 2..5 lost
    with open(o.segment_file(0), "r+b") as f:  # entry 5 torn: its last bytes never written
        f.seek(5 * 350 + 200)
        f.write(bytes(150))
    o.open()
    assert o.log.last_index == 4 and index.stat().st_size == 5 * 32
    assert same(all_entries(o.log), entries(0, 1, 5, size=300))
    assert o.commitlog.max_offset == 5 * 350 and o.segment_file(0).read_bytes()[5 * 350 :] == bytes(
        SEGMENT - 5 * 350
    )
    o.log.append(entries(5, 2, 1))
    assert same(all_entries(o.reopen()), [*entries(0, 1, 5, size=300), *entries(5, 2, 1)])


@pytest.mark.parametrize(
    "damage",
    ["body", "chain", "index of the next", "garbage after", "body behind its unit"],
)
def test_recovery_stops_at_the_first_entry_that_does_not_follow(tmp_path, damage):
    """A bad body CRC, a broken chain, an index out of sequence: the log ends before that entry. A
    last entry whose unit and header survived but not its body's last bytes (zeros in a segment
    that is never short) goes too."""
    o = Opened(tmp_path)
    o.log.append(entries(0, 1, 4, size=100))  # 150 bytes each
    o.close()
    index = tmp_path / "dledger" / f"{0:020d}.index"
    if damage != "body behind its unit":
        os.truncate(index, 2 * 32)  # entries 2 and 3 are found by the scan, checked
    with open(o.segment_file(0), "r+b") as f:
        if damage == "body behind its unit":
            f.seek(3 * 150 + 100)
            f.write(bytes(50))
        elif damage == "body":
            f.seek(2 * 150 + 60)
            f.write(b"X")
        elif damage == "chain":
            f.seek(2 * 150 + 36)
            f.write(b"\0\0\0\1")
        elif damage == "index of the next":
            f.seek(3 * 150 + 8)
            f.write(struct.pack(">q", 7))
        else:
            f.seek(4 * 150)
            f.write(b"\x00\x00\x00\x01\xff\xff")
    o.open()
    kept = {"body": 2, "chain": 2, "index of the next": 3, "garbage after": 4, "body behind its unit": 3}[
        damage
    ]
    assert o.log.last_index == kept - 1 and same(all_entries(o.log), entries(0, 1, kept, size=100))
    assert o.commitlog.max_offset == kept * 150


def test_a_torn_first_entry_of_a_later_segment_drops_that_segment_and_the_blank(tmp_path):
    o = Opened(tmp_path)
    o.log.append(entries(0, 1, 5, size=1000))  # 3 in the first segment, 2 in the second
    o.close()
    os.truncate(tmp_path / "dledger" / f"{SEGMENT:020d}.index", 0)  # units go after their entries
    with open(o.segment_file(SEGMENT), "r+b") as f:
        f.write(b"\0" * 8)
    o.open()
    assert o.log.last_index == 2 and o.commitlog.max_offset == 3 * 1050
    assert not o.segment_file(SEGMENT).exists() and len(list((tmp_path / "dledger").glob("*.index"))) == 1


def test_trim_deletes_whole_commitlog_segments_and_the_log_still_knows_the_term_before(tmp_path):
    o = Opened(tmp_path)
    o.log.append(entries(0, 1, 3, size=1000))
    o.log.append(entries(3, 2, 7, size=1000))  # segments of 3 entries: 0-2, 3-5, 6-8, 9
    assert o.log.trim(7) == 6 and o.commitlog.min_offset == 2 * SEGMENT
    assert not o.segment_file(0).exists() and not o.segment_file(SEGMENT).exists()
    log = o.reopen()
    assert (log.first_index, log.last_index, log.term_at(5)) == (6, 9, 2)
    assert same(all_entries(log), entries(6, 2, 4, size=1000))
    with pytest.raises(IndexError):
        log.term_at(4)
    assert log.trim(100) == 9 and log.read(8, 10, 1 << 20) == []


def test_a_classic_commitlog_stays_as_a_prefix_and_the_log_begins_at_the_next_segment(tmp_path):
    """Upgrade in place: the classic records stay readable, their segment closed by a classic blank;
    the Raft log begins at the next segment boundary (RocketMQ's dividedCommitlogOffset), also after
    a restart."""
    config = StoreConfig(store_path_root_dir=tmp_path, mapped_file_size_commit_log=SEGMENT)
    with MessageStore(config) as store:
        for n in range(5):
            assert store.put_message("T", 0, b"classic %d" % n).ok
        end = store.commitlog.max_offset
    cl = CommitLog(config.commitlog_dir, SEGMENT)
    cl.max_offset = end  # where the store's recovery leaves it
    log = CommitLogRaftLog(tmp_path / "dledger", cl)
    assert log.divided == SEGMENT and log.last_index == -1
    log.append(entries(0, 1, 2))
    assert positions_of(cl, SEGMENT, 2) == [SEGMENT, SEGMENT + 60]
    seg = cl.segment_for(0)
    assert seg is not None and read_record_meta(seg.mm, end, SEGMENT) is BLANK
    pos = 0
    for n in range(5):
        meta = read_record_meta(seg.mm, pos, SEGMENT)
        assert meta is not None and meta is not BLANK and meta.physical_offset == pos
        assert bytes(seg.mm[meta.body_start : meta.body_start + meta.body_len]) == b"classic %d" % n
        pos += meta.size
    log.close()
    cl.close()
    cl = CommitLog(config.commitlog_dir, SEGMENT)  # a restart: the split is kept, not recomputed
    log = CommitLogRaftLog(tmp_path / "dledger", cl)
    assert (log.divided, log.last_index, cl.max_offset) == (SEGMENT, 1, SEGMENT + 120)
    log.truncate(0)
    assert cl.max_offset == SEGMENT and cl.segment_for(0) is not None


def positions_of(cl: CommitLog, pos: int, n: int) -> list[int]:
    out = []
    for _ in range(n):
        seg = cl.segment_for(pos)
        assert seg is not None
        h = codec.decode_header(seg.mm, pos - seg.base)
        out.append(h.pos)
        pos += h.size
    return out


def record(topic: str, queue_id: int, queue_offset: int, phys: int, body: bytes) -> bytes:
    buf = bytearray(record_size(len(body), len(topic), 0))
    write_record(
        buf, 0, topic_block(topic.encode()), queue_id, 0, queue_offset, phys, 0, 1, HOST, 2, HOST, 0, 0,
        body, b"",
    )  # fmt: skip
    return bytes(buf)


def records_at(log: CommitLogRaftLog, messages: list[tuple[str, int, int, bytes]]) -> bytes:
    """The body of an entry of records built at the position it will take, as a leader builds it."""
    sizes = [record_size(len(body), len(topic), 0) for topic, _, _, body in messages]
    phys = log.next_pos(codec.BODY_OFFSET + sum(sizes)) + codec.BODY_OFFSET
    records = []
    for (topic, queue_id, offset, body), size in zip(messages, sizes, strict=True):
        records.append(record(topic, queue_id, offset, phys, body))
        phys += size
    return b"".join(records)


def propose(log: CommitLogRaftLog, index: int, messages: list[tuple[str, int, int, bytes]]) -> None:
    log.append([Entry(index, 1, records_at(log, messages))])


def test_dispatch_over_entries_builds_classic_queue_entries_up_to_the_commit(tmp_path):
    """ConsumeQueue entries point at the records inside the entries (pos + 48 on), a batch's
    records are one entry, NOOPs and blanks are stepped over, and nothing past the limit (the
    committed end) reaches a queue."""
    o = Opened(tmp_path)
    log = o.log
    log.append([Entry(0, 1, b"", codec.MAGIC_NOOP)])
    propose(log, 1, [("T", 0, 0, b"one")])
    propose(log, 2, [("T", 0, n, b"batch %d" % n) for n in (1, 2, 3)])
    propose(log, 3, [("T", 1, 0, b"other queue")])
    propose(log, 4, [("T", 0, 4, bytes(3500))])  # rolls to the next segment past a blank
    queues = ConsumeQueueTable(tmp_path / "cq", 600_000)
    dispatcher = Dispatcher(o.commitlog, queues, log.divided, scan=entry_scan)
    dispatcher.limit = log.end_of(3)  # entry 4 is not committed yet
    assert dispatcher.dispatch() == 5 and dispatcher.offset == log.end_of(3)
    t0, t1 = queues.get("T", 0), queues.get("T", 1)
    assert t0 is not None and t1 is not None and (t0.max_offset, t1.max_offset) == (4, 1)
    dispatcher.limit = log.end_of(4)
    assert dispatcher.dispatch() == 1 and t0.max_offset == 5
    bodies = []
    for n in range(5):
        entry = t0.entry(n)
        assert entry is not None
        raw = o.commitlog.read(entry[0], entry[1])
        assert raw is not None
        msg = decode_record(raw)
        assert (msg.queue_offset, msg.commitlog_offset) == (n, entry[0])
        bodies.append(bytes(msg.body))
    assert bodies == [b"one", b"batch 1", b"batch 2", b"batch 3", bytes(3500)]
    assert t0.entry(4)[0] == SEGMENT + codec.BODY_OFFSET  # type: ignore[index]
    queues.close()


def test_dispatch_refuses_an_entry_whose_record_is_not_where_it_stands(tmp_path):
    o = Opened(tmp_path)
    o.log.append([Entry(0, 1, record("T", 0, 0, 12345, b"misplaced"))])
    queues = ConsumeQueueTable(tmp_path / "cq", 600_000)
    dispatcher = Dispatcher(o.commitlog, queues, o.log.divided, scan=entry_scan)
    with pytest.raises(StoreError, match="corrupt"):
        dispatcher.dispatch()
    queues.close()


def of_records(root: Path, segment: int = SEGMENT) -> CommitLogRaftLog:
    """A log of CommitLog records, as a broker's: with its CommitLog's dispatcher."""
    cl = CommitLog(root / "commitlog", segment)
    dispatcher = Dispatcher(cl, ConsumeQueueTable(root / "cq", 600_000), 0, scan=entry_scan)
    return CommitLogRaftLog(root / "dledger", cl, dispatcher)


def close_with_store(log: CommitLogRaftLog) -> None:
    assert log.dispatcher is not None
    log.close()
    log.commitlog.close()
    log.dispatcher.queues.close()


def test_a_log_of_records_refuses_an_entry_whose_records_are_not_where_it_puts_them(tmp_path):
    """A follower's append checks each body it receives as the dispatch will: the entries before a
    misplaced or torn run of records are held, it and the rest are not, and nothing of it is in the
    CommitLog; a NOOP has no records to check."""
    log = of_records(tmp_path)
    cl = log.commitlog
    log.append([Entry(0, 1, b"", codec.MAGIC_NOOP)])
    propose(log, 1, [("T", 0, 0, b"one")])
    end = cl.max_offset
    good = records_at(log, [("T", 0, 1, b"two")])
    third = record("T", 0, 2, end + 2 * codec.BODY_OFFSET + len(good), b"three")  # where it would go
    for bad, why in [
        (record("T", 0, 2, 12345, b"three"), "not at its own offset"),
        (third[:-3], "no whole record"),
        (third + b"\0" * 8, "no whole record"),
    ]:
        with pytest.raises(EntryRefused, match=why) as refused:
            log.append([Entry(2, 1, good), Entry(3, 1, bad), Entry(4, 1, b"", codec.MAGIC_NOOP)])
        assert refused.value.index == 3 and log.last_index == 2
        assert cl.max_offset == log.end == log.end_of(2) > end
        log.truncate(2)
    log.append([Entry(2, 1, good), Entry(3, 1, third)])
    assert log.last_index == 3
    assert cl.max_offset == log.end == end + 2 * codec.BODY_OFFSET + len(good) + len(third)
    close_with_store(log)


def test_a_follower_whose_log_refuses_an_entry_holds_what_came_before_and_is_sent_it_again_per_heartbeat(
    tmp_path,
):
    """A member with another CommitLog segment size puts an entry that rolls elsewhere than its
    leader did: its records are not where the leader built them, so it refuses the entry (rather
    than stop its dispatch there). The leader commits with the other follower, counts what the
    refusing one holds, and sends it the entry again at each heartbeat, not in a tight loop."""
    sizes = {"n0": SEGMENT, "n1": SEGMENT, "n2": 2 * SEGMENT}
    logs = {i: of_records(tmp_path / i, size) for i, size in sizes.items()}
    net = Net(make_log=logs.__getitem__)
    leader = net.elect("n0")
    for n in range(3):  # the third rolls to the next segment on n0 and n1, not on n2
        leader.propose([records_at(logs["n0"], [("T", 0, n, bytes(1500))])])
        net.flush()
    assert leader.commit == 3 and logs["n1"].last_index == 3 and logs["n2"].last_index == 2
    assert logs["n2"].commitlog.max_offset == logs["n2"].end_of(2)
    (refusal,) = [m for m in net.sent if isinstance(m, AppendResponse) and m.refused]
    assert (refusal.src, refusal.match_index, refusal.reject_index) == ("n2", 2, 3)
    assert leader.progress["n2"].match == 2

    def sent_again() -> int:
        return sum(1 for m in net.sent if isinstance(m, Append) and m.dst == "n2" and m.entries)

    before = sent_again()
    net.tick("n0", times=2 * CFG.heartbeat_ticks)
    assert sent_again() == before + 2 and logs["n2"].last_index == 2
    for log in logs.values():
        close_with_store(log)


def leader_put(store: MessageStore, log: CommitLogRaftLog, index: int, c: PutCommand) -> int:
    """A put as a single-log leader makes it: its records written where its entry's body goes,
    then proposed (appended) as that body; the message's physical offset."""
    written = write_entry_body(store, log, c)
    assert not isinstance(written, PutResult)
    body, result = written
    assert result.ok and result.wrote_offset == log.end + codec.BODY_OFFSET
    log.append([Entry(index, 1, body)])
    return result.wrote_offset


def test_a_leaders_puts_are_dispatched_from_their_prepared_queue_entries_and_a_cut_drops_those(tmp_path):
    """The queue entries a leader's put prepared are found where its entry starts, so the dispatch
    copies them instead of walking the records again; a cut of the Raft log (a new leader's
    entries replace uncommitted ones) drops those past it, and the entry received there next is
    dispatched from the queue entries its append's check found."""
    config = StoreConfig(store_path_root_dir=tmp_path, mapped_file_size_commit_log=SEGMENT * 16)
    store = MessageStore(config).open()
    log = CommitLogRaftLog(tmp_path / "dledger", store.commitlog, store.dispatcher)
    store.hold_entries(log.divided)
    store.dispatcher.limit = store.dispatcher.offset
    scan, walked = store.dispatcher.scan, []

    def counted(*args):
        found = scan(*args)
        walked.append(found[2])
        return found

    store.dispatcher.scan = counted
    log.append([Entry(0, 1, b"", codec.MAGIC_NOOP)])
    at = [leader_put(store, log, n, PutCommand("T", 0, b"put %d" % n)) for n in (1, 2, 3, 4)]
    assert [p.start for p in store.dispatcher.prepared] == [a - codec.BODY_OFFSET for a in at]
    store.dispatcher.limit = log.end_of(2)
    assert store.dispatch() == 2 and sum(walked) == 0  # the NOOP walked, no record parsed
    log.truncate(3)  # entries 3 and 4 replaced by a new leader's
    assert [p.start for p in store.dispatcher.prepared] == []
    log.append([Entry(3, 2, records_at(log, [("T", 1, 0, b"the new leader's")]))])
    store.dispatcher.limit = log.end_of(3)
    assert store.dispatch() == 1 and sum(walked) == 0
    assert [bytes(m.body) for m in read_queue(store, "T", 0)] == [b"put 1", b"put 2"]
    assert [bytes(m.body) for m in read_queue(store, "T", 1)] == [b"the new leader's"]
    log.close()
    store.close()


def test_a_followers_entries_are_dispatched_from_the_queue_entries_its_check_found(tmp_path):
    """A body received is walked once, by the append's check: the dispatch copies the queue entries
    it found, but for a body of more than one queue's records, which the dispatch walks."""
    log = of_records(tmp_path)
    dispatcher = log.dispatcher
    assert dispatcher is not None
    scan, walked = dispatcher.scan, []

    def counted(*args):
        found = scan(*args)
        walked.append(found[2])
        return found

    dispatcher.scan = counted
    log.append([Entry(0, 1, b"", codec.MAGIC_NOOP)])
    propose(log, 1, [("T", 0, n, b"batch %d" % n) for n in range(3)])
    propose(log, 2, [("T", 1, 0, b"q1 first"), ("T", 2, 0, b"q2 first")])
    propose(log, 3, [("T", 0, 3, b"after")])
    assert [p.start for p in dispatcher.prepared] == [log.end_of(0), log.end_of(2)]
    dispatcher.limit = log.end_of(3)
    assert dispatcher.dispatch() == 6 and sum(walked) == 2  # only entry 2's records parsed
    queues = dispatcher.queues
    bodies = {
        (q, n): decode_record(log.commitlog.read(*queues.get("T", q).entry(n)[:2])).body  # type: ignore[misc, union-attr]
        for q, n in [(0, 0), (0, 2), (0, 3), (1, 0), (2, 0)]
    }
    assert {k: bytes(v) for k, v in bodies.items()} == {
        (0, 0): b"batch 0",
        (0, 2): b"batch 2",
        (0, 3): b"after",
        (1, 0): b"q1 first",
        (2, 0): b"q2 first",
    }
    close_with_store(log)


def test_a_store_on_the_single_log_dispatches_and_indexes_committed_entries_and_recovers_to_them(tmp_path):
    """A classic store upgraded in place: its records stay readable, entries are dispatched and
    indexed up to the commit (the dispatcher's limit) and no further; reopened, the store knows the
    single log by its `divided` file, dispatches again only what it had, and the Raft log keeps the
    rest for the leader's commit."""
    config = StoreConfig(
        store_path_root_dir=tmp_path, mapped_file_size_commit_log=SEGMENT * 16, max_hash_slot_num=64,
        max_index_num=256,
    )  # fmt: skip
    with MessageStore(config) as store:
        for n in range(3):
            assert store.put_message("T", 0, b"classic %d" % n, b"KEYS\x01c%d" % n).ok
    store = MessageStore(config).open()
    log = CommitLogRaftLog(tmp_path / "dledger", store.commitlog)
    store.hold_entries(log.divided)
    store.dispatcher.limit = store.dispatcher.offset
    store._periodic_checkpoint()  # a pass before the entries, so the next is within the thorough interval
    offsets = [
        leader_put(store, log, n, PutCommand("T", 0, b"entry %d" % n, properties=b"KEYS\x01e%d" % n))
        for n in range(4)
    ]
    assert offsets[0] == log.divided + codec.BODY_OFFSET
    committed = store.dispatcher.limit = log.end_of(2)  # entries 0-2 committed
    assert store.dispatch() == 3 and store.wait_dispatched()
    assert [bytes(m.body) for m in read_queue(store, "T", 0)][2:] == [
        b"classic 2",
        b"entry 0",
        b"entry 1",
        b"entry 2",
    ]
    assert store.visible_offset == log.end_of(2)
    assert len(store.query_message("T", "e2", 10, 0, 1 << 62)) == 1
    assert store.query_message("T", "e3", 10, 0, 1 << 62) == []  # not committed: not indexed
    store._periodic_checkpoint()  # the checkpoint is the single log's only mark of what was committed
    saved = Checkpoint.load(tmp_path / "checkpoint")
    assert saved is not None and saved.dispatched_offset == committed
    log.close()
    store.close()

    store = MessageStore(config).open()
    assert store.entries_from == log.divided and store.dispatcher.offset == committed
    assert [bytes(m.body) for m in read_queue(store, "T", 0)][-1] == b"entry 2"
    log = CommitLogRaftLog(tmp_path / "dledger", store.commitlog)
    assert log.last_index == 3 and store.commitlog.max_offset == log.end_of(3)
    store.dispatcher.limit = log.end_of(3)
    assert store.dispatch() == 1 and store.wait_dispatched()
    assert [bytes(m.body) for m in read_queue(store, "T", 0)][-2:] == [b"entry 2", b"entry 3"]
    assert len(store.query_message("T", "e3", 10, 0, 1 << 62)) == 1
    assert len(store.query_message("T", "c1", 10, 0, 1 << 62)) == 1
    log.close()
    store.close()
