"""How a consumer group splits a topic's queues among its members, as RocketMQ's strategies do.

Every member computes the split on its own from the same sorted inputs (the broker's consumer list
and the topic's route), so the results agree without any coordination. Both strategies give the
same answers as the Java classes, so Java and Python consumers can share a group.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence

from ferrymq.client.message import MessageQueue

Strategy = Callable[[str, Sequence[str], Sequence[MessageQueue]], list[MessageQueue]]


def average(client_id: str, client_ids: Sequence[str], queues: Sequence[MessageQueue]) -> list[MessageQueue]:
    """Contiguous blocks, the first `len(queues) % len(client_ids)` members one queue more
    (AllocateMessageQueueAveragely)."""
    index, members, total = client_ids.index(client_id), len(client_ids), len(queues)
    mod = total % members
    size = 1 if total <= members else total // members + (1 if index < mod else 0)
    start = index * size if index < mod else index * size + mod
    return list(queues[start : start + max(0, min(size, total - start))])


def consistent_hash(
    client_id: str, client_ids: Sequence[str], queues: Sequence[MessageQueue], virtual_nodes: int = 10
) -> list[MessageQueue]:
    """Each queue goes to the member whose virtual node follows it on an MD5 ring, so a member
    joining or leaving moves only its neighbours' queues (AllocateMessageQueueConsistentHash)."""
    ring = {_md5_hash(f"{cid}-{i}"): cid for cid in client_ids for i in range(virtual_nodes)}
    points = sorted(ring)
    mine = []
    for mq in queues:
        at = bisect.bisect_left(points, _md5_hash(_java_mq_string(mq)))
        if ring[points[at % len(points)]] == client_id:
            mine.append(mq)
    return mine


STRATEGIES: dict[str, Strategy] = {"average": average, "consistent_hash": consistent_hash}


def allocate(
    strategy: str, client_id: str, client_ids: Sequence[str], queues: Sequence[MessageQueue]
) -> list[MessageQueue]:
    """This member's queues; none when the broker does not list it (yet) as a member."""
    if client_id not in client_ids or not queues:
        return []
    return STRATEGIES[strategy](client_id, sorted(client_ids), sorted(queues, key=queue_order))


def queue_order(mq: MessageQueue) -> tuple[str, str, int]:
    """Java's MessageQueue.compareTo: topic, then broker, then queue id."""
    return mq.topic, mq.broker_name, mq.queue_id


def _md5_hash(key: str) -> int:
    """The first four bytes of the key's MD5, big-endian (ConsistentHashRouter.MD5Hash)."""
    return int.from_bytes(hashlib.md5(key.encode(), usedforsecurity=False).digest()[:4], "big")


def _java_mq_string(mq: MessageQueue) -> str:
    """MessageQueue.toString() in Java: the key a queue is hashed by."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"
