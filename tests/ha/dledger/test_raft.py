"""The Raft node driven by hand over a perfect, synchronous network: one behaviour per test."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from ferrymq.ha.dledger.entry import MAGIC_NOOP
from ferrymq.ha.dledger.log import Entry, MemoryLog, RaftLog
from ferrymq.ha.dledger.messages import Append, AppendResponse, VoteRequest, VoteResponse
from ferrymq.ha.dledger.raft import (
    HardState,
    NotLeader,
    RaftConfig,
    RaftNode,
    RaftSafetyError,
    Role,
)

CFG = RaftConfig(election_ticks=10, heartbeat_ticks=2, max_append_entries=2)


class Net:
    """Nodes whose Ready is applied at once; messages to or from an isolated node are lost."""

    def __init__(
        self,
        n: int = 3,
        config: RaftConfig = CFG,
        logs: dict[str, list[int]] | None = None,
        make_log: Callable[[str], RaftLog] | None = None,
    ) -> None:
        """`make_log(id)`: each node's log (by default a MemoryLog of `logs`, kept across restarts)."""
        self.ids = [f"n{i}" for i in range(n)]
        self.make_log = make_log
        self.config = config
        self.hard = {i: HardState() for i in self.ids}
        self.durable: dict[str, list[Entry]] = {}
        for i in self.ids:
            terms = (logs or {}).get(i, [])
            self.durable[i] = [Entry(k, t, b"%s-%d" % (i.encode(), k)) for k, t in enumerate(terms)]
            self.hard[i] = HardState(max(terms, default=0))
        self.nodes = {i: self._make(i) for i in self.ids}
        self.isolated: set[str] = set()
        self.sent: list[object] = []
        self.readies: dict[str, list] = {i: [] for i in self.ids}

    def _make(self, i: str) -> RaftNode:
        log = self.make_log(i) if self.make_log else MemoryLog(self.durable[i])
        return RaftNode(i, self.ids, log, self.hard[i], random.Random(i), self.config)

    def restart(self, i: str) -> None:
        self.nodes[i] = self._make(i)

    def flush(self) -> None:
        for _ in range(10_000):
            busy = [n for n in self.nodes.values() if n.has_ready()]
            if not busy:
                return
            for node in busy:
                rd = node.ready()
                self.readies[node.id].append(rd)
                if rd.hard_state is not None:
                    self.hard[node.id] = rd.hard_state
                if rd.unsynced_from is not None and isinstance(node.log, MemoryLog):
                    self.durable[node.id] = list(node.log.entries)
                for m in rd.messages:
                    self.sent.append(m)
                    if m.src not in self.isolated and m.dst not in self.isolated:
                        self.nodes[m.dst].step(m)
        raise AssertionError("the cluster never went quiet")

    def tick(self, *ids: str, times: int = 1) -> None:
        for _ in range(times):
            for i in ids or self.ids:
                self.nodes[i].tick()
            self.flush()

    def elect(self, i: str) -> RaftNode:
        """Let `i` time out first (nobody else ticks) and win."""
        node = self.nodes[i]
        for _ in range(100):
            if node.role is Role.LEADER:
                return node
            self.tick(i)
        raise AssertionError(f"{i} did not become leader")

    def leader(self) -> RaftNode:
        (leader,) = [n for n in self.nodes.values() if n.role is Role.LEADER and n.id not in self.isolated]
        return leader

    def terms(self, i: str) -> list[int]:
        return [e.term for e in self.nodes[i].log.entries]


def test_a_node_that_times_out_wins_with_pre_vote_then_vote_and_commits_a_noop():
    net = Net()
    leader = net.elect("n0")
    assert leader.term == 1
    kinds = [(type(m).__name__, getattr(m, "pre", None)) for m in net.sent[:4]]
    assert kinds == [("VoteRequest", True)] * 2 + [("VoteResponse", True)] * 2
    net.tick(times=2)
    for node in net.nodes.values():
        assert node.leader_id == "n0" and node.term == 1
        assert node.commit == 0 and node.log.read(0, 1, 1 << 20)[0].magic == MAGIC_NOOP


def test_a_vote_is_answered_in_the_same_ready_that_persists_it():
    net = Net()
    net.elect("n0")
    (rd,) = [
        r for r in net.readies["n1"] if any(isinstance(m, VoteResponse) and not m.pre for m in r.messages)
    ]
    assert rd.hard_state == HardState(1, "n0")


def test_proposals_commit_on_a_majority_and_followers_learn_the_commit_index():
    net = Net()
    leader = net.elect("n0")
    first = leader.propose([b"a", b"b", b"c"])
    net.flush()
    assert first == 1 and leader.commit == 3
    assert [r.unsynced_from for r in net.readies["n1"] if r.unsynced_from is not None][-1] is not None
    net.tick(times=2)
    assert all(n.commit == 3 and n.log.read(1, 9, 1 << 20)[-1].body == b"c" for n in net.nodes.values())


def test_one_follower_down_does_not_stop_commits_two_do():
    net = Net()
    leader = net.elect("n0")
    net.isolated.add("n2")
    leader.propose([b"x"])
    net.flush()
    assert leader.commit == 1
    net.isolated.add("n1")
    leader.propose([b"y"])
    net.flush()
    assert leader.commit == 1


def test_a_lagging_follower_catches_up_in_batches():
    net = Net()
    leader = net.elect("n0")
    net.isolated.add("n2")
    for k in range(20):
        leader.propose([b"%d" % k])
    net.flush()
    net.isolated.clear()
    net.tick("n0", times=4)
    assert net.terms("n2") == net.terms("n0") and net.nodes["n2"].commit == 20
    appends = [m for m in net.sent if isinstance(m, Append) and m.dst == "n2" and m.entries]
    assert max(len(m.entries) for m in appends) == CFG.max_append_entries


def test_pre_vote_keeps_an_isolated_node_from_raising_terms():
    net = Net()
    net.elect("n0")
    net.isolated.add("n2")
    net.tick("n2", times=100)
    assert net.nodes["n2"].term == 1 and net.nodes["n2"].role is Role.PRE_CANDIDATE
    net.isolated.clear()
    net.tick(times=5)
    assert net.leader().id == "n0" and net.leader().term == 1


def test_without_pre_vote_an_isolated_node_returns_with_a_high_term():
    net = Net(config=RaftConfig(election_ticks=10, heartbeat_ticks=2, pre_vote=False))
    net.elect("n0")
    net.isolated.add("n2")
    net.tick("n2", times=100)
    assert net.nodes["n2"].term > 3


def test_a_diverged_follower_is_truncated_with_one_rejection_per_term():
    # n1 holds uncommitted entries of terms 2 and 3 that n0 (terms 1 and 4) never had
    net = Net(logs={"n0": [1, 1, 1, 4, 4], "n1": [1, 1, 2, 2, 2, 2, 2, 3, 3, 3], "n2": [1, 1, 1, 4]})
    leader = net.elect("n0")
    assert leader.term == 5
    net.tick("n0", times=4)
    assert net.terms("n1") == net.terms("n0") == [1, 1, 1, 4, 4, 5]
    rejections = [m for m in net.sent if isinstance(m, AppendResponse) and m.src == "n1" and not m.success]
    assert 1 <= len(rejections) <= 3


def test_a_follower_never_truncates_a_committed_entry():
    node = RaftNode(
        "n1", ["n0", "n1"], MemoryLog([Entry(0, 1, b"a"), Entry(1, 1, b"b")]), HardState(1), random.Random(1)
    )
    node.step(Append("n0", "n1", 1, 1, 1, (), 1))
    assert node.commit == 1
    with pytest.raises(RaftSafetyError):
        node.step(Append("n0", "n1", 1, 0, 1, (Entry(1, 2, b"z"),), 1))


def test_a_stale_leader_steps_down_when_answered_with_a_newer_term():
    net = Net()
    net.elect("n0")
    net.isolated.add("n0")
    net.tick("n1", "n2", times=40)
    assert net.leader().id != "n0"
    net.isolated.clear()
    old = net.nodes["n0"]
    assert old.role is Role.LEADER
    net.tick("n0", times=2)  # its heartbeats are answered with the newer term
    assert old.role is Role.FOLLOWER and old.term > 1


def test_check_quorum_makes_a_cut_off_leader_step_down():
    net = Net()
    leader = net.elect("n0")
    net.isolated.add("n0")
    net.tick("n0", times=2 * CFG.election_ticks)
    assert leader.role is Role.FOLLOWER and leader.term == 1
    with pytest.raises(NotLeader):
        leader.propose([b"x"])


def test_leadership_transfer_catches_the_target_up_then_hands_over():
    net = Net()
    leader = net.elect("n0")
    net.isolated.add("n2")
    leader.propose([b"a", b"b"])
    net.flush()
    net.isolated.clear()
    leader.transfer_leadership("n2")
    with pytest.raises(NotLeader):
        leader.propose([b"refused while handing over"])
    net.tick("n0", times=4)  # the next heartbeats resend what n2 missed
    assert net.leader().id == "n2" and net.nodes["n2"].term == 2
    assert net.terms("n2")[:3] == net.terms("n0")[:3]


def test_transfer_needs_a_member_and_the_leader():
    net = Net()
    leader = net.elect("n0")
    with pytest.raises(ValueError):
        leader.transfer_leadership("n9")
    with pytest.raises(NotLeader):
        net.nodes["n1"].transfer_leadership("n2")


def test_a_failed_transfer_is_abandoned_after_an_election_timeout():
    net = Net()
    leader = net.elect("n0")
    net.isolated.add("n2")
    leader.transfer_leadership("n2")
    net.tick("n0", "n1", times=CFG.election_ticks)
    assert leader.role is Role.LEADER and leader.transfer_target is None
    leader.propose([b"accepted again"])


def test_the_preferred_leader_takes_over_once_caught_up():
    net = Net(config=RaftConfig(election_ticks=10, heartbeat_ticks=2, preferred_leader="n2"))
    net.elect("n0")
    net.tick("n0", times=4)
    assert net.leader().id == "n2"
    net.tick(times=10)
    assert net.leader().id == "n2"


def test_a_restarted_node_keeps_its_term_and_vote():
    net = Net()
    net.elect("n0")
    net.restart("n1")
    n1 = net.nodes["n1"]
    assert (n1.term, n1.voted_for, n1.log.last_index) == (1, "n0", 0)
    n1.step(VoteRequest("n2", "n1", 1, 5, 1))
    (answer,) = n1.ready().messages
    assert isinstance(answer, VoteResponse) and not answer.granted


def test_followers_refuse_proposals_and_name_the_leader():
    net = Net()
    net.elect("n0")
    with pytest.raises(NotLeader) as e:
        net.nodes["n1"].propose([b"x"])
    assert e.value.leader_id == "n0"
    with pytest.raises(ValueError):
        net.nodes["n0"].propose([])


def test_a_node_ignores_votes_while_it_hears_a_leader():
    net = Net()
    net.elect("n0")
    n1 = net.nodes["n1"]
    n1.step(VoteRequest("n2", "n1", 7, 50, 1))
    assert n1.term == 1 and not n1.ready().messages
    n1.step(VoteRequest("n2", "n1", 7, 50, 1, transfer=True))
    assert n1.term == 7 and n1.voted_for == "n2"


def test_bad_configuration_is_refused():
    with pytest.raises(ValueError):
        RaftConfig(election_ticks=2, heartbeat_ticks=2)
    with pytest.raises(ValueError):
        RaftConfig(eager_inflight=0)
    with pytest.raises(ValueError):
        RaftNode("n5", ["n0", "n1"], MemoryLog(), HardState(), random.Random(0))
    with pytest.raises(ValueError):
        MemoryLog().append([Entry(3, 1, b"")])


def test_a_leader_commits_an_older_terms_entry_only_with_one_of_its_own():
    # Raft's figure 8: index 1 (term 2) on a majority is not committed until index 2 (term 4) is
    cfg = RaftConfig(election_ticks=10, heartbeat_ticks=2, max_append_entries=1)
    log = MemoryLog([Entry(0, 1, b"a"), Entry(1, 2, b"b")])
    leader = RaftNode("n0", ["n0", "n1", "n2"], log, HardState(3), random.Random(0), cfg)
    while leader.role is not Role.PRE_CANDIDATE:
        leader.tick()
    leader.step(VoteResponse("n1", "n0", 4, True, pre=True))
    leader.step(VoteResponse("n1", "n0", 4, True))
    assert leader.role is Role.LEADER and leader.log.last_index == 2
    leader.step(AppendResponse("n1", "n0", 4, True, match_index=1))
    assert leader.commit == -1
    leader.step(AppendResponse("n1", "n0", 4, True, match_index=2))
    assert leader.commit == 2


def test_malformed_messages_are_dropped_without_changing_the_log():
    net = Net()
    leader = net.elect("n0")
    net.tick(times=2)
    n1 = net.nodes["n1"]
    n1.step(Append("n0", "n1", 1, 0, 1, (Entry(5, 1, b"gap"),), 0))
    n1.step(Append("n0", "n1", 1, 0, 1, (Entry(1, 1, b"a"), Entry(3, 1, b"c")), 0))
    assert n1.log.last_index == 0 and not n1.ready().messages
    n1.step(Append("n0", "n1", 1, -5, 0, (), 0))
    assert not n1.ready().messages
    leader.step(AppendResponse("n1", "n0", 1, True, match_index=99))
    leader.step(AppendResponse("n1", "n0", 1, False, reject_index=99, conflict_index=50))
    assert leader.progress["n1"].match == 0 and leader.progress["n1"].next == 1 and leader.commit == 0
    net.tick("n0", times=2)  # heartbeats still work


@pytest.mark.parametrize(("eager", "runs"), [(None, [[b"a"], [b"b"], [b"c"]]), (1, [[b"a"], [b"b", b"c"]])])
def test_proposals_beyond_the_eager_window_wait_for_an_ack_and_go_in_one_append(eager, runs):
    net = Net(config=RaftConfig(election_ticks=10, heartbeat_ticks=2, eager_inflight=eager))
    leader = net.elect("n0")
    net.sent.clear()
    for body in (b"a", b"b", b"c"):
        leader.propose([body])
    net.flush()
    sent = [[e.body for e in m.entries] for m in net.sent if isinstance(m, Append) and m.dst == "n1"]
    assert [run for run in sent if run] == runs
    assert leader.commit == 3
