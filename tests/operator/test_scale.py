"""Scaling a Broker out: which groups get scalePodName's metadata, and which topics are copied."""

from __future__ import annotations

from ferrymq.operator.metadata_copy import groups_to_seed, topics_to_copy
from ferrymq.protocol.bodies import TopicConfig


def test_only_groups_added_to_a_running_broker_are_seeded():
    spec = {"size": 4, "scalePodName": "b-0-master-0"}
    assert groups_to_seed(spec, {}) == []  # first creation: nothing to copy from
    assert groups_to_seed(spec, {"size": 2}) == [2, 3]
    assert groups_to_seed(spec, {"size": 2, "seededGroups": [2]}) == [3]
    assert groups_to_seed({"size": 4}, {"size": 2}) == []  # no scalePodName: new groups start empty
    assert groups_to_seed({"size": 1, "scalePodName": "x"}, {"size": 2}) == []  # scale-in


def test_topics_the_target_lacks_are_copied_but_not_reserved_ones():
    source = {n: TopicConfig(n) for n in ("Orders", "TBW102", "b-0", "Audit")}
    target = {"TBW102": TopicConfig("TBW102")}
    copied = topics_to_copy(source, target, reserved={"b", "b-0", "b-1"})
    assert [c.topic_name for c in copied] == ["Audit", "Orders"]
