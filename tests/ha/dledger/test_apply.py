"""Put commands as entry bodies, the member list, and applying each committed put exactly once
across a crash at any point around it."""

from __future__ import annotations

import pytest

from ferrymq.ha.dledger import command
from ferrymq.ha.dledger.apply import MARK, StoreApplier
from ferrymq.ha.dledger.entry import MAGIC_NOOP
from ferrymq.ha.dledger.filelog import FileLog
from ferrymq.ha.dledger.log import Entry
from ferrymq.ha.dledger.node import DLedgerNode, NodeSettings
from ferrymq.ha.dledger.peers import parse_peers, slave_broker_id
from ferrymq.protocol.batch import encode_batch
from ferrymq.store import MessageStore
from tests.store.conftest import read_queue, small_config

PUT = command.PutCommand(
    "T", 0, b"body", b"KEYS\x01k\x02", 1, 2, 1_700_000_000_000, b"\x7f\0\0\1\0\0\x27\x10", 3
)


@pytest.mark.parametrize(
    "c", [PUT, command.PutCommand("T", 3, b"\0\1batch", batch=True), command.PutCommand("t", 0, b"")]
)
def test_a_command_round_trips(c):
    back = command.decode(b"".join(command.encode(c)))
    assert (back.topic, back.queue_id, bytes(back.body), bytes(back.properties), back.flag, back.sys_flag,
            back.born_timestamp, back.born_host, back.reconsume_times, back.batch) == (
            c.topic, c.queue_id, bytes(c.body), bytes(c.properties), c.flag, c.sys_flag, c.born_timestamp,
            c.born_host, c.reconsume_times, c.batch)  # fmt: skip


def test_every_truncation_of_a_command_is_refused():
    raw = b"".join(command.encode(command.PutCommand("Topic", 0, b"", b"P\x01v\x02")))
    for n in range(len(raw)):
        with pytest.raises(command.CommandError):
            command.decode(raw[:n])


def test_peers_and_slave_ids():
    peers = parse_peers("n0-127.0.0.1:40911; n1-h:40912;n2-[::1]:40913")
    assert peers == {"n0": ("127.0.0.1", 40911), "n1": ("h", 40912), "n2": ("[::1]", 40913)}
    assert [slave_broker_id(n, peers) for n in peers] == [1, 2, 3]
    assert slave_broker_id("b", {"a": ("h", 1), "b": ("h", 2)}) == 2
    for bad in ("n0", "n0-h", "n0-h:0", "-h:1", "n0-h:1;n0-h:2", "n0-:1"):
        with pytest.raises(ValueError):
            parse_peers(bad)


def put_entry(index: int, c: command.PutCommand) -> Entry:
    return Entry(index, 1, b"".join(command.encode(c)))


ENTRIES = [
    put_entry(0, command.PutCommand("T", 0, b"m0", born_timestamp=1)),
    put_entry(1, command.PutCommand("T", 0, encode_batch([(b"b1", b"", 0), (b"b2", b"", 0)]), batch=True)),
    Entry(2, 1, b"", MAGIC_NOOP),
    put_entry(3, command.PutCommand("T" * 300, 0, b"refused: topic too long", born_timestamp=3)),
    put_entry(4, command.PutCommand("T", 0, b"m4", born_timestamp=4)),
    put_entry(5, command.PutCommand("T", 0, b"m5", born_timestamp=5)),
]
STORED = [b"m0", b"b1", b"b2", b"m4", b"m5"]


class Member:
    """A one-member group's node on a real store and log, restarted at will."""

    def __init__(self, root, segment_bytes: int = 1 << 30, **store_settings) -> None:
        self.store = MessageStore(small_config(root / "store", **store_settings)).open()
        log = FileLog(root / "dledger", segment_bytes)
        for e in ENTRIES:
            log.append([e])
        log.close()
        peers = {"n0": ("127.0.0.1", 1)}
        self.settings = NodeSettings("n0", peers, root / "dledger", segment_bytes=segment_bytes)
        self.applier = StoreApplier(self.store, lambda: None)
        self.node = self.start()

    def start(self) -> DLedgerNode:
        return DLedgerNode(self.settings, self.applier, lambda _: None)

    def crash(self) -> None:
        """The process dies: the files stay as they are, nothing more is flushed or marked."""
        self.node.log.close()
        self.node.mark.close()

    def bodies(self) -> list[bytes]:
        assert self.store.wait_dispatched()
        return [bytes(m.body) for m in read_queue(self.store, "T", 0)]


@pytest.mark.parametrize(("kept", "applied"), [(1, 0), (2, 0), (3, 1), (4, 4), (5, 5)])
def test_each_put_is_stored_exactly_once_whatever_the_commitlog_kept(tmp_path, kept, applied):
    """All six entries applied, the CommitLog flushed (and the mark saved) after the first; then the
    CommitLog keeps only its first `kept` messages, as after a power loss (2: half the batch), or
    all five. The NOOP and the refused put left no record: the walk passes them only on the way to
    a later entry's records."""
    m = Member(tmp_path)
    m.node._apply(0)
    m.store.commitlog.flush()
    assert m.node._save_mark(5)
    assert (m.node.mark.index, m.node.mark.offset) == (0, m.store.commitlog.max_offset)
    m.node._apply(5)
    assert not m.node._save_mark(5)  # nothing more is flushed: the mark stays behind the CommitLog
    assert m.store.wait_dispatched()
    offsets = [msg.commitlog_offset for msg in read_queue(m.store, "T", 0)]
    m.crash()
    if kept < len(STORED):
        m.store.truncate(offsets[kept])
    m.node = m.start()
    assert m.node.applied == applied
    m.node._apply(5)
    assert m.bodies() == STORED
    m.store.close()


def test_a_mark_from_earlier_versions_is_read(tmp_path):
    """`applied` held (i, where i's records begin), written before applying i."""
    m = Member(tmp_path)
    m.node._apply(0)
    begin_of_1 = m.store.commitlog.max_offset
    m.crash()
    (tmp_path / "dledger" / "applied_to").unlink()
    (tmp_path / "dledger" / "applied").write_bytes(MARK.pack(1, begin_of_1))
    m.node = m.start()
    assert (m.node.mark.index, m.node.mark.offset, m.node.applied) == (0, begin_of_1, 0)
    m.node._apply(5)
    assert m.bodies() == STORED
    m.store.close()


def test_the_raft_log_is_trimmed_behind_the_applied_mark_and_a_restart_still_stores_each_once(tmp_path):
    """Segments of about two entries, retention keeping nothing older than now (0 hours)."""
    m = Member(tmp_path, segment_bytes=100, file_reserved_time=0)
    m.node._apply(3)
    m.node.after_flush(5)  # nothing flushed yet: no mark, no trim
    assert (m.node.mark.index, m.node.log.first_index) == (-1, 0)
    m.store.commitlog.flush()
    m.node.after_flush(0)  # the log durable up to entry 0 only: the mark goes no further
    assert (m.node.mark.index, m.node.log.first_index) == (0, 0)
    m.node.after_flush(5)
    assert m.node.mark.index == 3  # the refused put: the next records go where its would have
    # segments hold entries 0-1, 2-3, 4-5: only the first is wholly below the mark's entry
    assert m.node.log.first_index == 2 and not (tmp_path / "dledger" / f"{0:020d}.data").exists()
    m.node._apply(5)
    m.store.commitlog.flush()
    m.node.after_flush(5)
    assert (m.node.mark.index, m.node.log.first_index) == (5, 4)  # the segment of 4 and 5 stays
    m.crash()
    m.node = m.start()
    assert (m.node.applied, m.node.log.first_index) == (5, 4)
    m.node._apply(5)
    assert m.bodies() == STORED
    m.store.close()
