"""Who becomes master: RocketMQ's DefaultElectPolicy as one pure function.

Candidates are the alive members of the SyncStateSet; only with ``enable_elect_unclean_master`` are
the other replicas tried when none of those is alive (that may lose acknowledged messages). A still
valid old master is kept; a designated broker is taken if it is a candidate (else nobody); otherwise
the best is the highest epoch, then the highest CommitLog offset, then the lowest electionPriority
value, then the lowest id (so that the choice is deterministic).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Standing:
    """What a broker last told the controller about itself (BROKER_HEARTBEAT)."""

    epoch: int = 0
    max_offset: int = 0
    election_priority: int = 0


def elect(
    sync_state_set: Iterable[int],
    all_replicas: Iterable[int] | None,
    old_master: int | None,
    preferred: int | None,
    alive: Callable[[int], bool],
    standing: Callable[[int], Standing],
) -> int | None:
    """The new master's id, or None when no broker may be elected."""
    for pool in (sync_state_set, all_replicas):
        if pool is None:
            continue
        candidates = [b for b in pool if alive(b)]
        if not candidates:
            continue
        if old_master in candidates and preferred in (None, old_master):
            return old_master
        if preferred is not None:
            return preferred if preferred in candidates else None

        def rank(b: int) -> tuple[int, int, int, int]:
            s = standing(b)
            return (-s.epoch, -s.max_offset, s.election_priority, b)

        return min(candidates, key=rank)
    return None
