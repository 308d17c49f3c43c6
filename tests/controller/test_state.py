"""The controller's state machine and election policy, without sockets, on a fake clock."""

from __future__ import annotations

import pickle
import random

import pytest

from ferrymq.controller.elect import Standing, elect
from ferrymq.controller.liveness import LivenessTable
from ferrymq.controller.state import ReplicasState
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.controller import SyncStateSet

NAME = "broker-a"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class World:
    """A state machine, a liveness table on a fake clock, and helpers that commit like the leader."""

    def __init__(self, unclean: bool = False) -> None:
        self.state = ReplicasState()
        self.clock = Clock()
        self.live = LivenessTable(10.0, self.clock)
        self.unclean = unclean

    def alive(self, name: str, broker_id: int) -> bool:
        return self.live.alive((name, broker_id))

    def standing(self, name: str, broker_id: int) -> Standing:
        return self.live.standing((name, broker_id))

    def commit(self, decision):
        for event in decision.events:
            self.state.apply(event)
        return decision

    def join(self, address: str) -> int:
        """A new broker: next id, apply it, heartbeat, register (as a broker's replicas manager does)."""
        broker_id = self.state.next_broker_id("c", NAME).header.next_broker_id
        assert self.commit(self.state.apply_broker_id("c", NAME, broker_id, f"{address};x{broker_id}")).ok
        self.beat(broker_id)
        assert self.commit(self.state.register_broker("c", NAME, broker_id, address, self.alive)).ok
        return broker_id

    def beat(self, broker_id: int, epoch: int = 0, offset: int = 0, priority: int = 0) -> None:
        self.live.heartbeat((NAME, broker_id), f"h:{broker_id}", standing=Standing(epoch, offset, priority))

    def elect(self, broker_id: int = -1, designate: bool = False):
        return self.commit(
            self.state.elect_master(NAME, broker_id, designate, self.alive, self.standing, self.unclean)
        )

    def alter(self, new_set: set[int]):
        s = self.state.sets[NAME]
        proposal = SyncStateSet(new_set, s.sync_state_set_epoch)
        return self.commit(
            self.state.alter_sync_state_set(NAME, s.master_id, s.master_epoch, proposal, self.alive)
        )

    @property
    def set(self):
        return self.state.sets[NAME]


def test_first_broker_to_ask_becomes_master_with_epoch_1():
    w = World()
    assert w.state.next_broker_id("c", NAME).header.next_broker_id == 1
    one = w.join("h:1")
    two = w.join("h:2")
    assert (one, two) == (1, 2)
    decision = w.elect(two)
    assert decision.ok and decision.header.master_broker_id == 2 and decision.header.master_epoch == 1
    assert (w.set.master_id, w.set.master_epoch, w.set.sync_state_set, w.set.sync_state_set_epoch) == (
        2,
        1,
        {2},
        1,
    )
    # The other broker asking afterwards finds the master in place.
    assert w.elect(one).code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
    registered = w.state.register_broker("c", NAME, one, "h:1", w.alive)
    assert registered.header.master_broker_id == 2 and registered.header.master_address == "h:2"


def test_ids_are_checked_and_reapplying_ones_own_id_works():
    w = World()
    bad = w.state.apply_broker_id("c", NAME, 5, "h:1;a")
    assert bad.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID and "first broker id is 1" in bad.remark
    w.join("h:1")
    assert (
        w.state.apply_broker_id("c", NAME, 1, "h:9;other").code == ResponseCode.CONTROLLER_BROKER_ID_INVALID
    )
    assert w.state.apply_broker_id("c", NAME, 1, "h:1;x1").ok  # the same broker after a restart
    unknown = w.state.register_broker("c", NAME, 7, "h:7", w.alive)
    assert unknown.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    moved = w.state.register_broker("c", NAME, 1, "h:new", w.alive)
    assert moved.events == [("update_address", NAME, 1, "h:new")]
    w.commit(moved)
    assert w.set.addresses[1] == "h:new"


def test_alter_sync_state_set_checks_master_epochs_replicas_and_liveness():
    w = World()
    for i in (1, 2, 3):
        w.join(f"h:{i}")
    w.elect(1)
    assert w.alter({1, 2, 3}).ok and w.set.sync_state_set_epoch == 2
    s = w.set
    cases = [
        (2, s.master_epoch, {1, 2}, s.sync_state_set_epoch, ResponseCode.CONTROLLER_INVALID_MASTER),
        (1, s.master_epoch - 1, {1, 2}, s.sync_state_set_epoch, ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH),
        (1, s.master_epoch, {1, 2}, 1, ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),
        (1, s.master_epoch, {1, 9}, s.sync_state_set_epoch, ResponseCode.CONTROLLER_INVALID_REPLICAS),
        (
            1,
            s.master_epoch,
            {2, 3},
            s.sync_state_set_epoch,
            ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
        ),
        (
            1,
            s.master_epoch,
            {1, 2, 3},
            s.sync_state_set_epoch,
            ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
        ),
    ]
    for master, epoch, new_set, set_epoch, code in cases:
        decision = w.state.alter_sync_state_set(
            NAME, master, epoch, SyncStateSet(new_set, set_epoch), w.alive
        )
        assert decision.code == code, (new_set, decision.remark)
        assert not decision.events
    w.clock.now += 11
    w.beat(1)
    w.beat(2)  # broker 3 stopped heartbeating
    dead = w.state.alter_sync_state_set(NAME, 1, 1, SyncStateSet({1, 3}, 2), w.alive)
    assert dead.code == ResponseCode.CONTROLLER_BROKER_NOT_ALIVE


def test_election_prefers_epoch_then_offset_then_priority():
    w = World()
    for i in (1, 2, 3, 4):
        w.join(f"h:{i}")
    w.elect(1)
    w.alter({1, 2, 3})
    w.clock.now += 11  # the master (1) stops heartbeating; 4 is alive but not in sync
    w.beat(2, epoch=1, offset=500, priority=5)
    w.beat(3, epoch=1, offset=900, priority=9)
    w.beat(4, epoch=1, offset=10_000)
    assert w.state.need_reelection(w.alive) == [NAME]
    decision = w.elect()
    assert decision.ok and decision.header.master_broker_id == 3 and decision.header.master_epoch == 2
    assert w.set.sync_state_set == {3}
    assert elect([2, 3], None, None, None, lambda b: True, lambda b: Standing(1, 7, 10 - b)) == 3
    assert elect([2, 3], None, None, None, lambda b: True, lambda b: Standing(b == 2, 0, 0)) == 2


def test_old_master_kept_designated_honoured_else_nobody():
    standing = lambda b: Standing()  # noqa: E731
    assert elect({1, 2}, None, 1, None, lambda b: True, standing) == 1
    assert elect({1, 2}, None, 1, 2, lambda b: True, standing) == 2
    assert elect({1, 2}, None, 1, 3, lambda b: True, standing) is None
    assert elect({1}, {1, 2}, 1, None, lambda b: b == 2, standing) == 2
    assert elect({1}, None, 1, None, lambda b: b == 2, standing) is None


@pytest.mark.parametrize("unclean", [False, True])
def test_no_live_sync_state_set_member_means_no_master_unless_unclean(unclean):
    w = World(unclean=unclean)
    for i in (1, 2):
        w.join(f"h:{i}")
    w.elect(1)  # SyncStateSet {1}: broker 2 never caught up
    w.clock.now += 11
    w.beat(2)
    decision = w.elect()
    if unclean:
        assert decision.ok and w.set.master_id == 2 and w.set.master_epoch == 2
    else:
        assert decision.code == ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE
        assert w.set.master_id is None and w.set.master_epoch == 1
        assert w.state.need_reelection(w.alive) == []
        # The old master comes back: it asks for an election and, being the SyncStateSet, wins.
        w.beat(1)
        assert w.elect(1).ok and w.set.master_id == 1 and w.set.master_epoch == 2


def test_manual_switch_and_master_still_exists():
    w = World()
    for i in (1, 2):
        w.join(f"h:{i}")
    w.elect(1)
    assert w.elect().code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
    assert w.elect(2, designate=True).code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED  # 2 is not in sync
    w.alter({1, 2})
    assert w.elect(2, designate=True).ok and w.set.master_id == 2 and w.set.master_epoch == 2


def test_events_decided_on_an_old_state_are_ignored():
    w = World()
    for i in (1, 2, 3):
        w.join(f"h:{i}")
    w.elect(1)
    w.alter({1, 2, 3})
    w.clock.now += 11
    w.beat(2, epoch=1, offset=10)
    w.beat(3, epoch=1, offset=5)
    first = w.state.elect_master(NAME, -1, False, w.alive, w.standing)
    again = w.state.elect_master(NAME, -1, False, w.alive, w.standing)  # e.g. by a leader about to lose
    assert [w.state.apply(e) for e in first.events] == [True]
    assert [w.state.apply(e) for e in again.events] == [False]
    assert w.set.master_epoch == 2
    stale_alter = ("alter", NAME, frozenset({2, 3}), 2, 1)
    assert w.state.apply(stale_alter) is False


def test_liveness_heartbeat_timeout_connection_close_and_grace():
    clock = Clock()
    live = LivenessTable(10.0, clock)
    conn = object()
    live.heartbeat((NAME, 1), "h:1", timeout=3.0, connection=conn)
    live.heartbeat((NAME, 2), "h:2")
    clock.now += 5
    assert not live.alive((NAME, 1)) and live.alive((NAME, 2))
    assert live.expire() == [(NAME, 1)]
    live.heartbeat((NAME, 1), "h:1", connection=conn)
    assert live.connection_closed(conn) == [(NAME, 1)] and not live.alive((NAME, 1))
    live.grant_grace([((NAME, 1), "h:1"), ((NAME, 2), "h:2")])
    clock.now += 9
    assert live.alive((NAME, 1))
    clock.now += 2
    assert not live.alive((NAME, 1)) and not live.alive((NAME, 2))


def test_clean_broker_data():
    w = World()
    for i in (1, 2):
        w.join(f"h:{i}")
    w.elect(1)
    refused = w.state.clean_broker_data(NAME, None, False, w.alive)
    assert refused.code == ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert w.state.clean_broker_data(NAME, {2}, False, w.alive).code != ResponseCode.SUCCESS  # alive
    w.commit(w.state.clean_broker_data(NAME, {2}, True, w.alive))
    assert set(w.set.addresses) == {1}
    w.commit(w.state.clean_broker_data(NAME, None, True, w.alive))
    assert NAME not in w.state.sets


@pytest.mark.parametrize("seed", range(20))
def test_random_schedule_keeps_the_invariants(seed):
    """Brokers die, come back, fall behind and catch up at random; the controller's rules must hold."""
    rng = random.Random(seed)
    w = World(unclean=seed % 4 == 0)
    ids = [w.join(f"h:{i}") for i in range(1, 4)]
    w.elect(rng.choice(ids))
    offsets = dict.fromkeys(ids, 0)
    up = set(ids)
    epochs_seen = [w.set.master_epoch]
    for _ in range(300):
        w.clock.now += rng.choice([0.5, 1, 4, 11])
        s = w.set
        if s.master_id in up and s.master_id is not None:
            offsets[s.master_id] += rng.randint(0, 100)
        action = rng.random()
        if action < 0.15 and len(up) > 1:
            up.discard(rng.choice(sorted(up)))
        elif action < 0.3:
            up.add(rng.choice(ids))
        for b in up:
            w.beat(b, epoch=s.master_epoch, offset=offsets[b], priority=b)
        before = (s.master_id, set(s.sync_state_set), s.master_epoch)
        if action < 0.5 and s.master_id in up:
            in_sync = {b for b in up if offsets[b] == offsets[s.master_id]} | {s.master_id}
            w.alter(in_sync)
            for b in in_sync:  # a replica in sync copies the master
                offsets[b] = offsets[s.master_id]
        for name in w.state.need_reelection(w.alive):
            assert name == NAME
            w.elect()
        s = w.set
        if s.master_id is not None:
            assert s.master_id in s.sync_state_set
            if s.master_id != before[0]:
                assert w.alive(NAME, s.master_id), "elected a broker whose heartbeats had stopped"
                assert w.unclean or s.master_id in before[1], "elected outside the SyncStateSet"
                assert s.master_epoch == before[2] + 1
        assert s.master_epoch >= epochs_seen[-1]
        epochs_seen.append(s.master_epoch)
    clone = pickle.loads(pickle.dumps(w.state))  # pysyncobj snapshots the state this way
    assert clone.sets[NAME] == w.set
