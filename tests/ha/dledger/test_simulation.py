"""Raft's safety properties over a few hundred seeded clusters, and proof that the checks bite.

`bench/dledger_sim.py` runs the same simulation over 10,000+ seeds; here a slice of them runs in
the normal suite. A failing seed replays exactly: `Cluster(seed).run()`.
"""

from __future__ import annotations

import pytest

from ferrymq.ha.dledger.raft import RaftConfig, RaftNode, Ready
from tests.ha.dledger.sim import Cluster, Violation, leader_failover, run_seed

SEEDS = 240


def run_many(seeds: range, **kw) -> tuple[list[str], list[Cluster]]:
    failures, clusters = [], []
    for seed in seeds:
        try:
            clusters.append(run_seed(seed, **kw))
        except Violation as e:
            failures.append(str(e))
    return failures, clusters


@pytest.mark.parametrize("size", [3, 5])
def test_no_seed_breaks_raft_or_loses_an_acknowledged_append(size):
    failures, clusters = run_many(range(SEEDS // 2), size=size)
    assert failures == []
    # the schedules did exercise what the properties are about
    total = {k: sum(c.stats[k] for c in clusters) for k in clusters[0].stats}
    assert min(total.values()) > 0, total
    assert sum(len(c.acked) for c in clusters) > 50 * len(clusters)


def test_logs_in_real_files_and_messages_as_frames(tmp_path):
    """The same schedules with FileLog (every restart reopens the files and runs their recovery) and
    every message sent as a wire frame."""
    clusters = [run_seed(seed, files=tmp_path / str(seed), wire=True) for seed in range(12)]
    assert sum(c.stats["torn"] for c in clusters) >= 3 and all(c.acked for c in clusters)


def test_a_seed_replays_exactly():
    a, b = run_seed(17), run_seed(17)
    assert (a.stats, a.acked, a.leaders) == (b.stats, b.acked, b.leaders)


class VotesForAnyLog(RaftNode):
    def _log_up_to_date(self, last_index: int, last_term: int) -> bool:
        return True


class CommitsBeyondWhatMatched(RaftNode):
    def _on_append(self, m) -> None:
        super()._on_append(m)
        self.commit = max(self.commit, min(m.commit, self.log.last_index))


class ForgetsItsVote(RaftNode):
    def ready(self) -> Ready:
        rd = super().ready()
        rd.hard_state = None
        return rd


@pytest.mark.parametrize("broken", [VotesForAnyLog, CommitsBeyondWhatMatched, ForgetsItsVote])
def test_the_checks_catch_a_broken_node(broken):
    for seed in range(300):
        try:
            run_seed(seed, node_factory=broken)
        except Violation:
            return
    pytest.fail(f"{broken.__name__} went unnoticed in 300 seeds")


def test_after_the_leader_crashes_a_new_one_acknowledges_appends():
    for seed in range(5):
        ms, c = leader_failover(seed, RaftConfig())  # raises Violation if no append is acknowledged
        assert ms > 0 and c.stats["crashes"] == 1


def test_logs_in_commitlog_segments(tmp_path):
    """The same schedules with DLedger's single log (entries in CommitLog segments, recovered at
    every restart, torn by crashes before a sync) and every message sent as a wire frame."""
    clusters = [run_seed(seed, files=tmp_path / str(seed), wire=True, single_log=True) for seed in range(12)]
    assert sum(c.stats["torn"] for c in clusters) >= 3 and all(c.acked for c in clusters)
