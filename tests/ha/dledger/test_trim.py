"""Retention of the Raft log: whole segments below the applied entries are deleted, the log still
answers for the entry before its first one, and the Raft node works on a log that does not start
at 0 (a follower behind the trimmed start cannot catch up and is reported; one that trimmed its
own log answers appends from below its start)."""

from __future__ import annotations

import logging
import os
import time

import pytest

from ferrymq.ha.dledger.commitlog_log import CommitLogRaftLog
from ferrymq.ha.dledger.filelog import FileLog
from ferrymq.ha.dledger.log import Entry, MemoryLog
from ferrymq.ha.dledger.messages import Append
from ferrymq.ha.dledger.raft import RaftConfig, RaftNode, Role
from ferrymq.ha.dledger.retention import LogRetention
from ferrymq.store.commitlog import CommitLog
from ferrymq.store.config import StoreConfig
from tests.ha.dledger.test_raft import Net

SEGMENT = 512  # bytes: a few entries per segment
CFG = RaftConfig(election_ticks=10, heartbeat_ticks=2, max_append_entries=4, pre_vote=False)


def bodies(log, start: int = 0) -> list[bytes]:
    return [bytes(e.body) for e in log.read(start, 1 << 20, 1 << 30)] if log.last_index >= start else []


def all_bodies(log) -> list[bytes]:
    out: list[bytes] = []
    i = log.first_index
    while i <= log.last_index:
        run = log.read(i, 1 << 20, 1 << 30)
        out += [bytes(e.body) for e in run]
        i += len(run)
    return out


def test_trim_deletes_whole_segments_and_survives_a_reopen(tmp_path):
    log = FileLog(tmp_path, SEGMENT)
    mem = MemoryLog()
    for i in range(60):
        e = [Entry(i, 1 + i // 20, b"%03d" % i + b"x" * 40)]
        log.append(e)
        mem.append(e)
    segments = sorted(tmp_path.glob("*.data"))
    assert len(segments) > 4
    first = log.trim(30)
    assert 0 < first <= 30 and first == int(sorted(tmp_path.glob("*.data"))[0].stem)
    assert len(sorted(tmp_path.glob("*.data"))) < len(segments)
    assert log.term_at(first - 1) == mem.term_at(first - 1)
    with pytest.raises(IndexError):
        log.term_at(first - 2)
    with pytest.raises(ValueError):
        log.truncate(first - 1)
    assert log.read(first - 1, 5, 1 << 20) == []
    log.close()
    log = FileLog(tmp_path, SEGMENT)
    assert (log.first_index, log.last_index) == (first, 59)
    assert log.term_at(first - 1) == mem.term_at(first - 1)
    assert all_bodies(log) == [bytes(e.body) for e in mem.entries[first:]]
    log.truncate(first)  # everything kept goes; the log is empty after its trimmed start
    log.append([Entry(first, 9, b"new")])
    log.close()
    log = FileLog(tmp_path, SEGMENT)
    assert (log.first_index, log.last_index, log.term_at(first)) == (first, first, 9)
    assert log.trim(10**6) == first  # never the last segment


def test_a_crash_between_saving_the_start_and_deleting_the_files_finishes_the_trim(tmp_path):
    log = FileLog(tmp_path, SEGMENT)
    for i in range(40):
        log.append([Entry(i, 1, b"y" * 50)])
    log.close()
    saved = {p.name: p.read_bytes() for p in tmp_path.glob("*.*")}
    log = FileLog(tmp_path, SEGMENT)
    first = log.trim(20)
    log.close()
    for name, raw in saved.items():  # the deleted segments are back, as if the deletes never ran
        (tmp_path / name).write_bytes(raw)
    log = FileLog(tmp_path, SEGMENT)
    assert (log.first_index, log.last_index) == (first, 39)
    assert int(sorted(tmp_path.glob("*.data"))[0].stem) == first


def test_a_torn_segment_drops_every_later_one(tmp_path):
    log = FileLog(tmp_path, SEGMENT)
    for i in range(40):
        log.append([Entry(i, 1, b"z" * 50)])
    log.close()
    segments = sorted(tmp_path.glob("*.data"))
    middle = segments[2]
    middle.write_bytes(middle.read_bytes()[:-5])  # its last entry torn: the next one has a gap
    log = FileLog(tmp_path, SEGMENT)
    assert log.last_index == int(segments[3].stem) - 2
    assert sorted(tmp_path.glob("*.data")) == segments[:3]
    log.append([Entry(log.last_index + 1, 2, b"after")])
    log.close()
    assert FileLog(tmp_path, SEGMENT).term_at(int(segments[3].stem) - 1) == 2


def test_a_log_in_the_single_files_of_earlier_versions_becomes_the_first_segment(tmp_path):
    log = FileLog(tmp_path / "new", 1 << 30)
    log.append([Entry(i, 1, b"%d" % i) for i in range(5)])
    log.close()
    old = tmp_path / "old"
    old.mkdir()
    for ext in ("data", "index"):
        (old / ext).write_bytes((tmp_path / "new" / f"{0:020d}.{ext}").read_bytes())
    log = FileLog(old, SEGMENT)
    assert bodies(log) == [b"%d" % i for i in range(5)]
    assert not (old / "data").exists()


LOGS = {
    "two files": lambda root: FileLog(root, SEGMENT),
    "single log": lambda root: CommitLogRaftLog(root / "dledger", CommitLog(root / "commitlog", SEGMENT)),
}


@pytest.fixture(params=list(LOGS))
def make_log(request):
    """Each Raft log kind in small segments: `FileLog`, and the single log in CommitLog segments."""
    return LOGS[request.param]


def group(root, make_log) -> Net:
    """Three nodes on file-backed logs in small segments, each Ready carried out at once."""
    return Net(config=CFG, make_log=lambda i: make_log(root / i))


def propose(net: Net, leader: RaftNode, n: int, tag: str) -> None:
    for k in range(n):
        leader.propose([f"{tag}{k}".encode() + b"." * 40])
        net.flush()


def split(root, make_log, before: int, after: int) -> tuple[Net, RaftNode]:
    """A group whose n2 was cut off after `before` entries, while the leader n0 took `after` more."""
    g = group(root, make_log)
    leader = g.elect("n0")
    propose(g, leader, before, "a")
    g.isolated.add("n2")
    propose(g, leader, after, "b")
    return g, leader


def test_a_follower_behind_the_leaders_trimmed_start_is_stranded_the_others_go_on(tmp_path, make_log):
    g, leader = split(tmp_path, make_log, 5, 40)
    assert leader.log.trim(leader.commit) > g.nodes["n2"].log.last_index + 1
    g.isolated.clear()
    g.tick(times=30)
    assert leader.role is Role.LEADER and leader.stranded() == ["n2"]
    propose(g, leader, 3, "c")  # the healthy majority still commits
    assert leader.commit == leader.log.last_index == g.nodes["n1"].log.last_index
    assert g.nodes["n2"].log.last_index < leader.log.first_index


def test_a_follower_holding_the_entry_before_the_trimmed_start_catches_up(tmp_path, make_log):
    g, leader = split(tmp_path, make_log, 30, 20)
    follower_end = g.nodes["n2"].log.last_index
    first = leader.log.trim(follower_end + 1)
    assert first == follower_end + 1 or first <= follower_end  # a segment boundary at or below it
    g.isolated.clear()
    g.tick(times=10)
    assert leader.stranded() == []
    assert g.nodes["n2"].log.last_index == leader.log.last_index
    assert all_bodies(g.nodes["n2"].log)[-20:] == all_bodies(leader.log)[-20:]


def test_a_follower_that_trimmed_its_own_log_matches_appends_from_below_it(tmp_path, make_log):
    g = group(tmp_path, make_log)
    leader = g.elect("n0")
    propose(g, leader, 40, "a")
    n1 = g.nodes["n1"]
    first = n1.log.trim(n1.commit)
    assert first > 10
    n1.log.close()  # type: ignore[attr-defined]
    g.restart("n1")  # a restarted node's commit index is -1, below its trimmed start
    n1 = g.nodes["n1"]

    def answer(prev: int, count: int):
        entries = leader.log.read(prev + 1, count, 1 << 20)
        n1.step(Append("n0", "n1", leader.term, prev, leader.log.term_at(prev), entries, leader.commit))
        (m,) = n1.ready().messages
        return m.success, m.match_index

    assert answer(first - 10, 4) == (True, first - 6)  # late appends, all of it trimmed here
    assert answer(first - 4, 6) == (True, first + 2)  # across the trimmed start
    assert answer(first - 1, 2) == (True, first + 1)
    propose(g, leader, 3, "b")
    assert n1.log.last_index == leader.log.last_index


def test_retention_deletes_applied_segments_older_than_the_commitlogs_reserved_time(tmp_path, caplog):
    log = FileLog(tmp_path, SEGMENT)
    for i in range(60):
        log.append([Entry(i, 1, b"r" * 60)])
    now = time.time()
    firsts = [int(p.stem) for p in sorted(tmp_path.glob("*.data"))]
    for k, first in enumerate(firsts):  # segment k last written 100 - k hours ago
        os.utime(tmp_path / f"{first:020d}.data", (now, now - (100 - k) * 3600))
    usage = [50.0]
    stranded: list[str] = []
    config = StoreConfig(store_path_root_dir=tmp_path, file_reserved_time=98, disk_max_used_space_ratio=75)
    retention = LogRetention(log, config, lambda: usage[0], lambda: stranded, "n0")
    # older than 98 h: segments 0 and 1 (100 h, 99 h); 2 is 98 h old and stays
    assert retention.run(applied=59, now=now) == firsts[2]
    assert retention.run(applied=firsts[2] - 1, now=now) == firsts[2]
    usage[0] = 80.0  # disk pressure: every applied segment goes, whatever its age
    assert retention.run(applied=firsts[4], now=now) == firsts[4]
    assert retention.run(applied=59, now=now) == firsts[-1]  # never the last segment
    stranded.append("n2")
    with caplog.at_level(logging.ERROR):
        retention.run(applied=59, now=now)
        retention.run(applied=59, now=now)
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "n2 lack entries before" in caplog.records[0].message
