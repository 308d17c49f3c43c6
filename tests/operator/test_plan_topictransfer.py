"""TopicTransfer's plan: RocketMQ's seven steps in order, their admin calls, and the undo."""

from __future__ import annotations

import pytest

from ferrymq.operator import plan_topictransfer as plan
from ferrymq.operator.plan_topictransfer import Action

SPEC = {"topic": "TopicTest", "sourceCluster": "broker-0", "targetCluster": "broker-1"}
GROUPS = ["g1", "g2"]


def test_a_transfer_walks_the_seven_steps_in_order():
    status: dict = {}
    walked = []
    while (step := plan.next_step(status)) is not None:
        walked.append(step)
        status = plan.after_success(status, step)
    assert walked == list(plan.STEPS) and status["phase"] == plan.SUCCEEDED
    assert plan.next_step(status) is None


def test_each_step_acts_on_the_right_cluster():
    calls = {step: plan.actions(step, SPEC, GROUPS) for step in plan.STEPS}
    assert calls["sync-groups"] == [Action("create_group", "broker-1", group="g1"),
                                    Action("create_group", "broker-1", group="g2")]  # fmt: skip
    assert calls["create-target-topic"] == [Action("create_topic", "broker-1", topic="TopicTest")]
    assert calls["stop-source-writes"] == [Action("set_topic_perm", "broker-0", topic="TopicTest", perm=4)]
    assert {a.op for a in calls["wait-consumed"]} == {"wait_consumed"} and len(calls["wait-consumed"]) == 2
    assert calls["delete-source-topic"] == [Action("delete_topic", "broker-0", topic="TopicTest")]
    assert [a.group for a in calls["delete-source-groups"]] == GROUPS
    assert [a.topic for a in calls["create-retry-topics"]] == ["%RETRY%g1", "%RETRY%g2"]
    with pytest.raises(ValueError, match="no step"):
        plan.actions("teleport", SPEC, GROUPS)


def test_a_failure_undoes_the_source_changes_latest_first():
    status: dict = {}
    for step in plan.STEPS[:5]:  # up to and including the source topic's deletion
        status = plan.after_success(status, step)
    failed = plan.after_failure(status, "delete-source-groups", "broker-0 unreachable")
    assert failed["phase"] == plan.ROLLING_BACK and "unreachable" in failed["message"]
    assert plan.next_step(failed) is None  # nothing runs forward once rolling back
    assert plan.undo(failed["completedSteps"], SPEC, GROUPS) == [
        Action("create_topic", "broker-0", topic="TopicTest", perm=4),
        Action("set_topic_perm", "broker-0", topic="TopicTest", perm=6),
    ]
    assert plan.undo(["sync-groups", "create-target-topic"], SPEC, GROUPS) == []  # target keeps them


def test_a_status_out_of_order_is_refused():
    with pytest.raises(ValueError, match="prefix"):
        plan.next_step({"completedSteps": ["create-target-topic"]})
