"""Rolling a broker group onto a new pod template without taking its master down first.

A group is one StatefulSet per member, so the operator chooses the order: the members that are not
the master change one at a time, each only once the one before is back and ready; then, in CONTROLLER mode,
the controllers are asked to make an updated in-sync member the master, and the old master changes
last, as a slave. In STATIC mode the master cannot move and changes last. A group with no ready
member (being created, or down anyway) changes all at once: there is nothing to keep serving.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """What to do for one group now: "patch" `statefulsets`, "elect" `statefulsets[0]`, "wait", or "done"."""

    action: str
    statefulsets: tuple[str, ...] = ()
    reason: str = ""


def next_step(
    members: list[str], changed: set[str], ready: set[str], master: str | None, electable: set[str]
) -> Step:
    """The next step of a group's rollout.

    `members` are its StatefulSets in order, `changed` those whose template differs from the
    desired one, `ready` those whose pod is ready and up to date, `master` the one whose broker is
    the master now (None: unknown), `electable` the members the controllers may make master (alive,
    in the SyncStateSet; empty in STATIC mode)."""
    todo = [m for m in members if m in changed]
    if not todo:
        return Step("done")
    if not ready & set(members):
        return Step("patch", tuple(todo))
    rolling = [m for m in members if m not in ready and m not in changed]
    if rolling:  # changed already, not back yet
        return Step("wait", reason=f"{', '.join(rolling)} not ready")
    followers = [m for m in todo if m != master]  # an unready one first: restarting it costs nothing
    if followers:
        followers.sort(key=lambda m: m in ready)
        return Step("patch", (followers[0],))
    assert master is not None  # todo is non-empty and only the master is left
    successors = [m for m in members if m != master and m in electable and m not in changed]
    if successors:
        return Step("elect", (successors[0],), reason=f"moving the master off {master}")
    return Step("patch", (master,))
