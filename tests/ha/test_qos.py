"""Replication QoS transitions on a fake clock: single master → async → semi-sync → sync and back."""

from __future__ import annotations

import pytest

from ferrymq.ha.qos import NEVER, QosState, ReplicaProgress, ReplicationQos, SendLog

S = QosState


def qos(level: int = 2, gap: int = 4) -> ReplicationQos:
    return ReplicationQos(level, gap=gap, stall=3.0, narrow_every=0.2, now=0.0)


def sends(q: ReplicationQos, *ends: int) -> None:
    for end in ends:
        q.sends.sent(end)


def test_send_log_counts_sends_a_replica_lacks_and_the_window_target():
    log = SendLog(capacity=3)
    assert log.gap(0) == 0 and log.target(0) == 0
    for end in (10, 20, 30, 40, 50):
        log.sent(end)
    assert log.gap(50) == 0
    assert log.gap(30) == 2
    assert log.gap(0) == 4  # more than the capacity: capacity + 1
    assert log.target(0) == 50  # within 0 sends: has the last one
    assert log.target(2) == 30
    assert log.target(9) == 0  # fewer sends recorded than the window: nothing to wait for


def test_walks_up_from_single_master_to_sync():
    q = qos()
    assert q.step([], 0.1, synced=False) is S.SINGLE_MASTER and not q.holds_sends
    sends(q, *range(100, 1100, 100))  # ten sends, ends 100..1000
    far = ReplicaProgress(2, acked=100, last_ack=0.1)
    assert q.step([far], 0.2, synced=False) is S.ASYNC  # 9 sends behind > gap 4
    assert q.join_at() == NEVER and not q.holds_sends
    near = ReplicaProgress(2, acked=700, last_ack=0.3)
    assert q.step([near], 0.3, synced=False) is S.SEMI_SYNC  # 3 behind
    assert q.holds_sends and q.window == 4 and q.join_at() == NEVER
    assert q.step([near], 0.5, synced=False) is S.SEMI_SYNC and q.window == 2  # halves every 0.2 s
    assert q.step([near], 0.7, synced=False) is S.SEMI_SYNC and q.window == 1
    assert q.join_at() == NEVER
    assert q.step([near], 0.9, synced=False) is S.SEMI_SYNC and q.window == 0
    q.sends.acknowledge(900)
    assert q.join_at() == 900  # a replica joins once it has every acknowledged send
    assert q.step([near], 1.0, synced=True) is S.SYNC
    assert q.join_at() is None  # further replicas join by the SyncStateSet's own rule


def test_steps_down_when_the_set_shrinks_or_the_replica_stalls_or_goes():
    q = qos()
    sends(q, 100, 200)
    r = ReplicaProgress(2, acked=100, last_ack=0.0)  # lacks the send ending at 200
    q.step([r], 0.1, synced=True)
    assert q.state is S.SYNC
    assert q.step([r], 5.0, synced=True) is S.SYNC  # a member holds sends however long it is silent
    assert q.step([r], 5.1, synced=False) is S.ASYNC  # the set shrank; the replica is stale
    fresh = ReplicaProgress(2, acked=100, last_ack=5.2)
    assert q.step([fresh], 5.3, synced=False) is S.SEMI_SYNC
    assert q.step([fresh], 8.1, synced=False) is S.SEMI_SYNC  # last ack 2.9 s ago: still counts
    assert q.step([fresh], 8.3, synced=False) is S.ASYNC  # no ack for longer than the stall time
    assert q.step([], 8.4, synced=False) is S.SINGLE_MASTER


def test_an_idle_replica_that_has_every_send_stays_fresh():
    q = qos()
    sends(q, 100)
    idle = ReplicaProgress(2, acked=100, last_ack=0.0)
    assert q.step([idle], 0.1, synced=False) is S.SEMI_SYNC
    assert q.step([idle], 60.0, synced=False) is S.SEMI_SYNC and q.window == 0
    sends(q, 200)  # a send it never acks
    assert q.step([idle], 60.1, synced=False) is S.ASYNC


def test_a_replica_of_the_set_still_holds_sends_while_disconnected():
    q = qos()
    assert q.step([], 0.1, synced=True) is S.SYNC and q.holds_sends


@pytest.mark.parametrize("level", [0, 1])
def test_levels_0_and_1_are_asynchronous_whatever_the_replicas_do(level):
    q = qos(level)
    assert q.step([], 0.1, synced=False) is S.SINGLE_MASTER
    caught_up = ReplicaProgress(2, acked=0, last_ack=0.1)
    assert q.step([caught_up], 0.2, synced=True) is S.ASYNC
    assert not q.holds_sends and q.join_at() is None


def test_level_must_be_known():
    with pytest.raises(ValueError):
        qos(3)
