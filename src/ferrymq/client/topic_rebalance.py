"""Spreading write load onto broker groups added to a cluster (vivo's load balancer): measure each
topic's put TPS per broker group, then move the busiest topics' queues off the most loaded groups
onto the least loaded ones, each relocation one topic move (topic_move.py), planned before anything
is done so it can be shown and confirmed.

`plan_rebalance` is pure; `measure_put_tps` reads the figures from topic stats (two samples of
each queue's max offset, `window` seconds apart), which every broker answers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ferrymq.client.admin import Admin
from ferrymq.client.admin_stats import AdminRefused

SYSTEM_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_", "SCHEDULE_TOPIC_", "TRANS_", "TBW102")


@dataclass(frozen=True)
class Relocation:
    """Move `topic`'s queues on `source` to `target`: the topic ends on `placement`."""

    topic: str
    source: str
    target: str
    tps: float  # the topic's put TPS on `source`, which moves with it
    placement: tuple[str, ...]


def plan_rebalance(tps: dict[str, dict[str, float]], brokers: list[str], top: int = 10) -> list[Relocation]:
    """`tps`: topic -> broker group -> put TPS; `brokers`: every broker group that may take topics.

    The `top` busiest topics, busiest first: each moves its queues from the most loaded group
    holding it to the least loaded group not holding it, when that narrows the gap between the two
    (the source's load minus the target's exceeds what moves). One relocation per topic."""
    load = {b: 0.0 for b in brokers}
    for per_broker in tps.values():
        for b, t in per_broker.items():
            load[b] = load.get(b, 0.0) + t
    busiest = sorted(tps, key=lambda topic: (-sum(tps[topic].values()), topic))[:top]
    moves = []
    for topic in busiest:
        holders = set(tps[topic])
        free = [b for b in brokers if b not in holders]
        if not free or not holders:
            continue
        hot = max(holders, key=lambda b: (load[b], b))
        cold = min(free, key=lambda b: (load[b], b))
        moving = tps[topic][hot]
        if moving <= 0 or load[hot] - load[cold] <= moving:
            continue
        load[hot] -= moving
        load[cold] += moving
        placement = tuple(sorted(holders - {hot} | {cold}))
        moves.append(Relocation(topic, hot, cold, moving, placement))
    return moves


async def measure_put_tps(
    admin: Admin, topics: list[str], window: float = 10.0
) -> dict[str, dict[str, float]]:
    """Topic -> broker group -> messages put per second over `window` seconds (topics that vanish
    meanwhile are left out). Every topic's groups appear, with 0.0 where nothing was put."""
    before = await _stored(admin, topics)
    await asyncio.sleep(window)
    after = await _stored(admin, list(before))
    return {
        topic: {b: (after[topic].get(b, 0) - n) / window for b, n in before[topic].items()}
        for topic in after
        if topic in before
    }


def user_topics(topics: list[str]) -> list[str]:
    """The topics a rebalance may move: not the brokers' own (retry, dead letter, system)."""
    return [t for t in topics if not t.startswith(SYSTEM_PREFIXES)]


async def _stored(admin: Admin, topics: list[str]) -> dict[str, dict[str, int]]:
    """Topic -> broker group -> sum of its queues' max offsets."""
    stored: dict[str, dict[str, int]] = {}
    for topic in topics:
        try:
            stats = await admin.topic_stats(topic)
        except AdminRefused:
            continue
        per_broker = stored[topic] = {}
        for mq, offsets in stats.items():
            per_broker[mq.broker_name] = per_broker.get(mq.broker_name, 0) + offsets.max_offset
    return stored
