"""SyncStateSet rules on a fake clock: shrink after ha_max_time_slave_not_catchup, expand on catch-up."""

from __future__ import annotations

from ferrymq.ha.sync_state import SyncStateTracker


def test_lagging_replica_leaves_and_returns_when_caught_up():
    t = SyncStateTracker(master_id=1, max_not_catchup=15.0, now=0.0)
    t.connected(2, now=0.0)
    t.transferred(2, master_max=100, now=0.0)
    t.acked(2, 100, now=0.1)
    assert t.proposal(master_max=100, now=0.2) == {1, 2}  # caught up: joins
    t.apply({1, 2}, epoch=1)
    assert t.proposal(100, 10.0) is None  # idle but caught up: stays

    # The master writes on; the replica stops acking.
    t.transferred(2, master_max=500, now=11.0)
    assert t.proposal(500, 15.0) is None  # last caught up at 0.1: 14.9 s ago
    assert t.proposal(500, 16.0) == {1}
    t.apply({1}, epoch=2)
    assert t.confirm_offset(500) == 500  # the master alone

    t.acked(2, 500, now=17.0)  # caught up with the transfer at 11.0
    assert t.proposal(500, 17.1) == {1, 2}


def test_disconnected_member_is_dropped_after_the_timeout_only():
    t = SyncStateTracker(master_id=0, max_not_catchup=5.0, now=0.0)
    t.connected(1, 0.0)
    t.acked(1, 0, 0.0)
    t.apply({0, 1}, epoch=1)
    t.disconnected(1)
    assert t.proposal(0, 4.0) is None
    assert t.proposal(0, 5.5) == {0}
    assert t.confirm_offset(0) == 0


def test_confirm_offset_is_the_lowest_member_ack():
    t = SyncStateTracker(master_id=1, max_not_catchup=15.0, now=0.0)
    for broker_id, acked in ((2, 300), (3, 200)):
        t.connected(broker_id, 0.0)
        t.acked(broker_id, acked, 0.0)
    t.apply({1, 2, 3}, epoch=1)
    assert t.confirm_offset(400) == 200
    assert 1 in t.sync_state_set
    t.apply({2}, epoch=2)  # the master always stays in
    assert t.sync_state_set == {1, 2}
