"""TopicTransfer as a plan: RocketMQ's seven steps, the admin actions of each, and what undoes them.

apache/rocketmq-operator moves a topic from one cluster to another with mqadmin in this order:
(1) every consumer group of the topic onto the target, (2) the topic onto the target, (3) writes on
the source stopped (perm 4, read only), (4) wait until every group's lag on the source is 0,
(5) the topic deleted on the source, (6) the groups deleted on the source, (7) each group's
%RETRY% topic created on the target. When a step fails, what the finished steps changed on the
source is undone in reverse: the groups and topic re-created, writes allowed again (the target keeps
what it got, as in Apache's operator). This module only says what to do; an executor runs the
actions against the cluster and records progress in the resource's status.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.operator.pods import Obj

PERM_READ = 4
PERM_READ_WRITE = 6
RETRY_PREFIX = "%RETRY%"  # RocketMQ's MixAll.RETRY_GROUP_TOPIC_PREFIX


@dataclass(frozen=True)
class Action:
    """One admin call: `op` on `cluster`, for a topic or a consumer group."""

    op: str  # create_group | create_topic | set_topic_perm | wait_consumed | delete_topic | delete_group
    cluster: str
    topic: str = ""
    group: str = ""
    perm: int = PERM_READ_WRITE


STEPS = (
    "sync-groups",
    "create-target-topic",
    "stop-source-writes",
    "wait-consumed",
    "delete-source-topic",
    "delete-source-groups",
    "create-retry-topics",
)

PENDING, RUNNING, SUCCEEDED, ROLLING_BACK, ROLLED_BACK, FAILED = (
    "Pending", "Running", "Succeeded", "RollingBack", "RolledBack", "Failed",
)  # fmt: skip


def actions(step: str, spec: Obj, groups: list[str]) -> list[Action]:
    """The admin calls of `step` for the transfer `spec` whose topic the consumer `groups` read."""
    topic, source, target = spec["topic"], spec["sourceCluster"], spec["targetCluster"]
    if step == "sync-groups":
        return [Action("create_group", target, group=g) for g in groups]
    if step == "create-target-topic":
        return [Action("create_topic", target, topic=topic)]
    if step == "stop-source-writes":
        return [Action("set_topic_perm", source, topic=topic, perm=PERM_READ)]
    if step == "wait-consumed":
        return [Action("wait_consumed", source, topic=topic, group=g) for g in groups]
    if step == "delete-source-topic":
        return [Action("delete_topic", source, topic=topic)]
    if step == "delete-source-groups":
        return [Action("delete_group", source, group=g) for g in groups]
    if step == "create-retry-topics":
        return [Action("create_topic", target, topic=RETRY_PREFIX + g) for g in groups]
    raise ValueError(f"no step {step!r}")


def undo(completed: list[str], spec: Obj, groups: list[str]) -> list[Action]:
    """What puts the source back as it was, for the steps completed so far, latest first."""
    topic, source = spec["topic"], spec["sourceCluster"]
    out: list[Action] = []
    for step in reversed(completed):
        if step == "delete-source-groups":
            out += [Action("create_group", source, group=g) for g in groups]
        elif step == "delete-source-topic":
            out.append(Action("create_topic", source, topic=topic, perm=PERM_READ))
        elif step == "stop-source-writes":
            out.append(Action("set_topic_perm", source, topic=topic, perm=PERM_READ_WRITE))
    return out


def next_step(status: Obj) -> str | None:
    """The step to run now given the status so far; None when there is nothing left to run."""
    if status.get("phase") in (SUCCEEDED, ROLLING_BACK, ROLLED_BACK, FAILED):
        return None
    done = list(status.get("completedSteps") or [])
    if done != list(STEPS[: len(done)]):
        raise ValueError(f"completedSteps {done} are not a prefix of {list(STEPS)}")
    return STEPS[len(done)] if len(done) < len(STEPS) else None


def after_success(status: Obj, step: str) -> Obj:
    """The status once `step` succeeded."""
    done = [*(status.get("completedSteps") or []), step]
    phase = SUCCEEDED if len(done) == len(STEPS) else RUNNING
    return {**status, "completedSteps": done, "step": step, "phase": phase, "message": f"{step} done"}


def after_failure(status: Obj, step: str, error: str) -> Obj:
    """The status once `step` failed: the completed steps are to be undone."""
    return {**status, "step": step, "phase": ROLLING_BACK, "message": f"{step} failed: {error}"}
