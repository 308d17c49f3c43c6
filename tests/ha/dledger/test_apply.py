"""Put commands as entry bodies, the member list, and applying each committed put exactly once
across a crash at any point around it."""

from __future__ import annotations

import pytest

from ferrymq.ha.dledger import command
from ferrymq.ha.dledger.apply import StoreApplier
from ferrymq.ha.dledger.filelog import FileLog
from ferrymq.ha.dledger.log import Entry
from ferrymq.ha.dledger.node import DLedgerNode, NodeSettings
from ferrymq.ha.dledger.peers import parse_peers, slave_broker_id
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


@pytest.mark.parametrize("put_before_crash", [False, True])
def test_an_entry_begun_before_a_crash_is_applied_exactly_once(tmp_path, put_before_crash):
    """The mark of entry 1 is written, then the member dies before or after storing it."""
    store = MessageStore(small_config(tmp_path / "store")).open()
    log = FileLog(tmp_path / "dledger")
    bodies = [b"".join(command.encode(command.PutCommand("T", 0, f"m{i}".encode(), born_timestamp=i + 1)))
              for i in range(3)]  # fmt: skip
    log.append([Entry(i, 1, body) for i, body in enumerate(bodies)])
    log.close()
    settings = NodeSettings("n0", {"n0": ("127.0.0.1", 1)}, tmp_path / "dledger")
    applier = StoreApplier(store, lambda: None)
    node = DLedgerNode(settings, applier, lambda _: None)
    node._apply(0)
    node.mark.save(1, applier.end)
    if put_before_crash:
        applier.apply(command.decode(bodies[1]))
    node.log.close()
    node.mark.close()

    again = DLedgerNode(settings, applier, lambda _: None)
    assert again.applied == (1 if put_before_crash else 0)
    again._apply(2)
    assert store.wait_dispatched()
    assert [bytes(m.body) for m in read_queue(store, "T", 0)] == [b"m0", b"m1", b"m2"]
    again.log.close()
    store.close()
