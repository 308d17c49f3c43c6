"""TopicTransfer: one pass of plan_topictransfer's steps (or its undo), and its status."""

from __future__ import annotations

from typing import Any

from ferrymq.operator import plan_topictransfer, status, topictransfer
from ferrymq.operator.context import Settings, Waiting, namesrv_addr
from ferrymq.operator.kube import Kube
from ferrymq.operator.pods import Obj


async def reconcile_topictransfer(kube: Kube, settings: Settings, body: Obj) -> dict[str, Any]:
    """One pass of the transfer: the steps that can run now, or the undo after a failure."""
    spec, namespace = body["spec"], body["metadata"]["namespace"]
    addr = await namesrv_addr(kube, spec, namespace)
    keys = ("phase", "step", "completedSteps", "message", "groups")
    st: dict[str, Any] = {k: v for k, v in (body.get("status") or {}).items() if k in keys}
    if "groups" not in st:
        try:
            st["groups"] = await topictransfer.groups_of(addr, spec["sourceCluster"], spec["topic"])
        except topictransfer.ActionFailed as e:
            raise Waiting("SourceUnreachable", str(e)) from None
        st.update(phase=plan_topictransfer.RUNNING, completedSteps=[])
    groups = st["groups"]
    if st["phase"] == plan_topictransfer.ROLLING_BACK:
        try:
            for action in plan_topictransfer.undo(st["completedSteps"], spec, groups):
                await topictransfer.execute(addr, spec["sourceCluster"], action)
            st["phase"] = plan_topictransfer.ROLLED_BACK
        except topictransfer.ActionFailed as e:
            st.update(phase=plan_topictransfer.FAILED, message=f"{st.get('message')}; undo failed: {e}")
    while (step := plan_topictransfer.next_step(st)) is not None:
        try:
            for action in plan_topictransfer.actions(step, spec, groups):
                await topictransfer.execute(addr, spec["sourceCluster"], action)
        except topictransfer.NotYet as e:
            st.update(step=step, message=str(e))
            break
        except topictransfer.ActionFailed as e:
            st = plan_topictransfer.after_failure(st, step, str(e))  # undone on the next pass
            break
        st = plan_topictransfer.after_success(st, step)
    phase = st["phase"]
    if phase == plan_topictransfer.SUCCEEDED:
        health = status.Health(
            True, False, False, "Succeeded", f"{spec['topic']} is on {spec['targetCluster']}"
        )
    elif phase in (plan_topictransfer.ROLLED_BACK, plan_topictransfer.FAILED):
        health = status.degraded(phase, st.get("message", ""))
    else:
        health = status.waiting(phase, st.get("message", ""))
    return {**st, "_health": health}
