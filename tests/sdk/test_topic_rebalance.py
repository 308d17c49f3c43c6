"""The rebalance planner: the busiest topics' queues leave the loaded broker groups for idle ones."""

from __future__ import annotations

from ferrymq.client.topic_move import Observed, StepKind, plan
from ferrymq.client.topic_rebalance import Relocation, plan_rebalance, user_topics
from ferrymq.protocol.bodies import SubscriptionGroupConfig, TopicConfig


def test_new_groups_take_the_busiest_topics():
    tps = {
        "Orders": {"a": 300.0, "b": 300.0},
        "Clicks": {"a": 200.0},
        "Audit": {"b": 50.0},
        "Rare": {"a": 1.0},
    }
    moves = plan_rebalance(tps, ["a", "b", "c", "d"], top=10)
    assert moves[:2] == [
        Relocation("Orders", "a", "c", 300.0, ("b", "c")),
        Relocation("Clicks", "a", "d", 200.0, ("d",)),
    ]
    load = {"a": 501.0, "b": 350.0, "c": 0.0, "d": 0.0}
    for m in moves:
        load[m.source] -= m.tps
        load[m.target] += m.tps
    assert max(load.values()) - min(load.values()) < 501.0  # narrower than before
    assert max(load.values()) <= 350.0


def test_balanced_or_idle_clusters_move_nothing():
    assert plan_rebalance({"T": {"a": 100.0}, "U": {"b": 100.0}}, ["a", "b"]) == []
    assert plan_rebalance({"T": {"a": 0.0}}, ["a", "b"]) == []
    assert plan_rebalance({"T": {"a": 10.0, "b": 10.0}}, ["a", "b"]) == []  # on every group already


def test_top_limits_the_topics_considered():
    tps = {f"T{i}": {"a": float(10 + i)} for i in range(5)}
    assert [m.topic for m in plan_rebalance(tps, ["a", "b", "c"], top=2)] == ["T4", "T3"]


def test_system_topics_are_not_moved():
    assert user_topics(["Orders", "%RETRY%g", "%DLQ%g", "TBW102", "rmq_sys_trace"]) == ["Orders"]


def test_a_move_within_a_cluster_leaves_shared_groups_and_brokers_alone():
    observed = Observed(
        configs={"a": TopicConfig("T", 4, 4), "b": TopicConfig("T", 4, 4)},
        groups={"g": SubscriptionGroupConfig("g"), "h": SubscriptionGroupConfig("h")},
        target_groups=frozenset({"h"}),
        shared_groups=frozenset({"h"}),
    )
    move = plan("T", ["b", "c"], observed)
    assert (move.source, move.target) == (("a",), ("c",))
    steps = {s.kind: s for s in move.steps}
    assert steps[StepKind.CREATE_GROUPS].groups == ("g",)  # h is on the target already
    assert steps[StepKind.DELETE_GROUPS].groups == ("g",)  # h consumes other topics on a
    assert steps[StepKind.DRAIN].groups == ("g", "h") and steps[StepKind.DRAIN].brokers == ("a",)
    shrink = plan("T", ["b"], observed)  # only leaving: nothing created
    assert [s.kind for s in shrink.steps] == [
        StepKind.STOP_WRITES, StepKind.DRAIN, StepKind.DELETE_TOPIC, StepKind.DELETE_GROUPS,
    ]  # fmt: skip
