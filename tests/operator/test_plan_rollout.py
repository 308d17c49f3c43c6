"""The order a broker group is rolled in: followers one at a time, the master moved away, then it."""

from __future__ import annotations

from ferrymq.operator.plan_rollout import Step, next_step

GROUP = ["b-0-0", "b-0-1", "b-0-2"]
ALL = set(GROUP)


def test_nothing_changed_is_done():
    assert next_step(GROUP, set(), ALL, "b-0-0", ALL) == Step("done")


def test_a_group_with_no_ready_member_changes_at_once():
    assert next_step(GROUP, ALL, set(), None, set()) == Step("patch", tuple(GROUP))


def test_followers_first_one_at_a_time_while_all_are_ready():
    assert next_step(GROUP, ALL, ALL, "b-0-1", ALL) == Step("patch", ("b-0-0",))
    waiting = next_step(GROUP, {"b-0-1", "b-0-2"}, ALL - {"b-0-0"}, "b-0-1", ALL)
    assert waiting.action == "wait" and "b-0-0" in waiting.reason
    assert next_step(GROUP, {"b-0-1", "b-0-2"}, ALL, "b-0-1", ALL) == Step("patch", ("b-0-2",))


def test_an_unready_follower_still_to_change_goes_first():
    """A follower that is down anyway (say, a demoted master that did not catch up) is restarted
    onto the new template rather than waited for."""
    assert next_step(GROUP, {"b-0-0", "b-0-2"}, ALL - {"b-0-2"}, "b-0-1", ALL) == Step("patch", ("b-0-2",))


def test_the_master_moves_to_an_updated_in_sync_member_before_it_changes():
    step = next_step(GROUP, {"b-0-1"}, ALL, "b-0-1", {"b-0-0", "b-0-1"})
    assert step.action == "elect" and step.statefulsets == ("b-0-0",)
    # once elected elsewhere, the old master is a follower like any other
    assert next_step(GROUP, {"b-0-1"}, ALL, "b-0-0", ALL) == Step("patch", ("b-0-1",))


def test_static_masters_cannot_move_and_change_last():
    group = ["b-0-master", "b-0-replica-1"]
    assert next_step(group, set(group), set(group), "b-0-master", set()) == Step("patch", ("b-0-replica-1",))
    assert next_step(group, {"b-0-master"}, set(group), "b-0-master", set()) == Step("patch", ("b-0-master",))
