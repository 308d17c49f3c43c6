"""The file-backed Raft log: DLedger's bytes on disk, the same answers as the in-memory log, and
recovery from torn writes (simulated by cutting and corrupting the files; no process is killed)."""

from __future__ import annotations

import os
import random

import pytest

from ferrymq.ha.dledger import entry as codec
from ferrymq.ha.dledger import hardstate
from ferrymq.ha.dledger.filelog import FileLog
from ferrymq.ha.dledger.log import Entry, MemoryLog
from ferrymq.ha.dledger.messages import Append
from ferrymq.ha.dledger.raft import HardState, RaftNode

SEG0 = "00000000000000000000.{}"  # the first segment's files


def entries(first: int, term: int, n: int, size: int = 10) -> list[Entry]:
    return [Entry(first + k, term, b"%d:" % (first + k) + b"x" * size) for k in range(n)]


def same(a, b) -> bool:
    return [(e.index, e.term, bytes(e.body), e.magic) for e in a] == [
        (e.index, e.term, bytes(e.body), e.magic) for e in b
    ]


def test_the_files_are_dledger_entries_and_index_units(tmp_path):
    log = FileLog(tmp_path)
    log.append([*entries(0, 1, 3), Entry(3, 2, b"", codec.MAGIC_NOOP)])
    log.close()
    data = (tmp_path / SEG0.format("data")).read_bytes()
    index = (tmp_path / SEG0.format("index")).read_bytes()
    offset, chain = 0, 0
    for i in range(4):
        h, _ = codec.decode(data, offset)
        assert (h.index, h.pos, h.chain_crc) == (i, offset, codec.chain_crc(chain, h.body_crc))
        assert codec.decode_index(index, i * 32) == (h.magic, offset, h.size, i, h.term)
        offset, chain = offset + h.size, h.chain_crc
    assert offset == len(data) and len(index) == 4 * 32 and h.magic == codec.MAGIC_NOOP


def like_the_memory_log(rng: random.Random, log, reopen, body: int, limit: int):
    """300 random appends (bodies up to `body` bytes), truncations and reopenings (`reopen(log)`
    gives the log opened again), each followed by a read (up to `limit` bytes) and a term checked
    against a MemoryLog's. In small segments, a read stops at the end of a segment: a prefix of the
    memory log's. Returns the log and the memory log."""
    mem = MemoryLog()
    term = 1
    for step in range(300):
        op = rng.random()
        if op < 0.5:
            batch = [
                Entry(mem.last_index + 1 + k, term, rng.randbytes(rng.randint(0, body))) for k in range(3)
            ]
            mem.append(batch)
            log.append(batch)
        elif op < 0.65 and mem.last_index >= 0:
            cut = rng.randint(0, mem.last_index)
            mem.truncate(cut)
            log.truncate(cut)
            term += 1
        elif op < 0.75:
            log = reopen(log)
        start = rng.randint(0, mem.last_index + 1)
        count, limit = rng.randint(1, 10), rng.randint(0, limit)
        assert log.last_index == mem.last_index, step
        got, want = log.read(start, count, limit), mem.read(start, count, limit)
        assert same(got, want[: len(got)]) and bool(got) == bool(want), step
        if mem.last_index >= 0:
            i = rng.randint(-1, mem.last_index)
            assert log.term_at(i) == mem.term_at(i)
    with pytest.raises(IndexError):
        log.term_at(log.last_index + 1)
    with pytest.raises(ValueError):
        log.append(entries(log.last_index + 2, term, 1))
    return log, mem


@pytest.mark.parametrize("segment_bytes", [1 << 30, 300])
def test_it_answers_like_the_memory_log_through_appends_truncations_and_reopening(tmp_path, segment_bytes):
    def reopen(log: FileLog) -> FileLog:
        log.close()
        return FileLog(tmp_path, segment_bytes)

    like_the_memory_log(random.Random(5), FileLog(tmp_path, segment_bytes), reopen, 40, 200)


def test_an_append_of_more_entries_than_one_system_call_takes(tmp_path):
    log = FileLog(tmp_path)
    many = entries(0, 1, 3000)
    log.append(many)
    log.close()
    assert same(FileLog(tmp_path).read(0, 5000, 1 << 30), many)


def reopened_after(tmp_path, damage) -> FileLog:
    log = FileLog(tmp_path)
    log.append(entries(0, 1, 5) + entries(5, 2, 5))
    log.close()
    damage(tmp_path / SEG0.format("data"), tmp_path / SEG0.format("index"))
    return FileLog(tmp_path)


def cut(path, n) -> None:
    os.truncate(path, path.stat().st_size - n)


def flip(path, from_end) -> None:
    raw = bytearray(path.read_bytes())
    raw[-from_end] ^= 1
    path.write_bytes(raw)


@pytest.mark.parametrize(
    ("damage", "last"),
    [
        (lambda d, i: None, 9),
        (lambda d, i: cut(d, 3), 8),  # torn last entry
        (lambda d, i: cut(i, 32 * 4), 9),  # index units lost: rebuilt from the data
        (lambda d, i: (cut(i, 40), cut(d, 1)), 8),  # both torn
        (lambda d, i: cut(d, 200), 5),  # index points past the data (entries are 60 bytes)
        (lambda d, i: d.write_bytes(d.read_bytes() + b"\x00" * 100), 9),  # preallocated zeros
        (lambda d, i: d.write_bytes(d.read_bytes() + b"\x01\x02garbage" * 9), 9),
        (lambda d, i: (d.write_bytes(b""), i.write_bytes(b"")), -1),
    ],
)
def test_opening_recovers_the_longest_whole_prefix(tmp_path, damage, last):
    log = reopened_after(tmp_path, damage)
    assert log.last_index == last
    assert same(log.read(0, 100, 1 << 20), (entries(0, 1, 5) + entries(5, 2, 5))[: last + 1])
    log.append(entries(last + 1, 3, 2))  # the chain CRC carries on from the recovered end
    log.close()
    assert FileLog(tmp_path).last_index == last + 2


def test_a_corrupted_body_behind_a_written_index_unit_is_dropped_with_the_unit(tmp_path):
    def damage(d, i) -> None:
        flip(d, 2)
        cut(i, 32)  # the unit of the damaged entry is gone, so recovery re-checks it

    assert reopened_after(tmp_path, damage).last_index == 8


def test_a_follower_persists_what_the_leader_sends_and_comes_back_with_it(tmp_path):
    state = hardstate.load(tmp_path)
    log = FileLog(tmp_path / "log")
    node = RaftNode("n1", ["n0", "n1", "n2"], log, state, random.Random(0))
    node.step(Append("n0", "n1", 3, -1, 0, entries(0, 2, 4) + entries(4, 3, 1), 2))
    rd = node.ready()
    assert rd.hard_state == HardState(3, None) and rd.unsynced_from == 0
    hardstate.save(tmp_path, rd.hard_state)
    log.sync()
    log.close()
    log = FileLog(tmp_path / "log")
    again = RaftNode("n1", ["n0", "n1", "n2"], log, hardstate.load(tmp_path), random.Random(0))
    assert (again.term, again.log.last_index, again.log.term_at(4)) == (3, 4, 3)


def test_the_hard_state_file_round_trips_and_refuses_garbage(tmp_path):
    hardstate.save(tmp_path, HardState(7, "n2"))
    assert (tmp_path / "currterm").read_text() == "currTerm=7\nvoteLeader=n2\n"
    assert hardstate.load(tmp_path) == HardState(7, "n2")
    hardstate.save(tmp_path, HardState(8))
    assert hardstate.load(tmp_path) == HardState(8, None)
    for bad in ("currTerm=x\n", "voteLeader=n1\n", "nonsense\n", "currTerm=-1\n"):
        (tmp_path / "currterm").write_text(bad)
        with pytest.raises(ValueError, match="currterm"):
            hardstate.load(tmp_path)


def test_an_append_made_while_another_thread_syncs_is_synced_by_the_next_sync(tmp_path, monkeypatch):
    log = FileLog(tmp_path)
    log.append(entries(0, 1, 1))
    log.sync()
    real, calls = os.fsync, []

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            log.append(entries(2, 1, 1))  # the writer goes on during the fsync
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    log.append(entries(1, 1, 1))
    log.sync()
    synced = len(calls)
    log.sync()
    assert len(calls) > synced
    log.sync()
    assert len(calls) == synced + 2  # data and index once more, then nothing left to sync


def test_the_terms_of_recent_entries_are_answered_without_reading_the_files(tmp_path, monkeypatch):
    log = FileLog(tmp_path)
    log.append(entries(0, 1, 5))
    log.append(entries(5, 2, 5))
    reads = []
    pread = os.pread
    monkeypatch.setattr(os, "pread", lambda *a: reads.append(a) or pread(*a))
    assert [log.term_at(i) for i in range(-1, 10)] == [0] + [1] * 5 + [2] * 5
    assert reads == []
    log.close()
