"""Replication QoS: how strongly a master's acknowledgements depend on its replicas, per broker group.

Pure logic over an injected clock (the master's HA service feeds it acks and sends), so every
transition is tested without sockets or sleeping. The levels (setting ``replication_qos_level``):

- 0 and 1: asynchronous replication, availability first: no send ever waits for a replica.
- 2: the group walks up as replicas allow and back down when they fall away:

  ``single_master`` (no replica connected) → ``async`` (a replica copies, sends do not wait) →
  ``semi_sync`` (a fresh replica is within ``gap`` sends of the master: from now on a send is held
  until a replica is within ``window`` sends of it; the window narrows by half every
  ``narrow_every`` seconds, down to 0, so the replica closes the last gap while producers are
  slowed, not stopped) → ``sync`` (a replica holds every acknowledged send and entered the
  SyncStateSet — the master proposes it, the controller decides in controller mode; a send is
  acknowledged only once every SyncStateSet member has it).

  Down: the SyncStateSet shrinks (a member not caught up for ``ha_max_time_slave_not_catchup``), or
  in ``semi_sync`` no replica that lacks a send acked for that long → ``async``; no replica connected →
  ``single_master``. Sends held when the group steps down answer FLUSH_SLAVE_TIMEOUT (they were
  not replicated as promised); later ones are acknowledged at once.

Distances are counted in sends (a batch is one send) by `SendLog`, which keeps the end offsets of
the last sends: other CommitLog writers (schedule, transactions, pop) do not count.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass

NEVER = 1 << 63  # a join offset no replica reaches


class QosState(enum.StrEnum):
    SINGLE_MASTER = "single_master"
    ASYNC = "async"
    SEMI_SYNC = "semi_sync"
    SYNC = "sync"


#: The gauge value of each state (higher waits more), for metrics and tables.
STATE_RANK = {s: i for i, s in enumerate(QosState)}


@dataclass(frozen=True, slots=True)
class ReplicaProgress:
    """One connected replica as the master sees it."""

    broker_id: int
    acked: int  # CommitLog offset it acknowledged
    last_ack: float  # when its last ack came


class SendLog:
    """The end offsets of the last `capacity` sends: how many sends a replica lacks, and which send's
    end it must reach for a new send to be within `window` sends of it."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._ends: deque[int] = deque(maxlen=capacity + 1)
        self.acknowledged = 0  # the highest end offset acknowledged to a producer

    def sent(self, end_offset: int) -> None:
        self._ends.append(end_offset)

    def gap(self, acked: int) -> int:
        """Sends whose end lies beyond `acked` (capacity + 1 means "more than capacity")."""
        count = 0
        for end in reversed(self._ends):
            if end <= acked:
                break
            count += 1
        return count

    def target(self, window: int) -> int:
        """The offset a replica must have for the last send to be within `window` sends of it."""
        ends = self._ends
        return ends[-1 - window] if window < len(ends) else 0

    def acknowledge(self, end_offset: int) -> None:
        self.acknowledged = max(self.acknowledged, end_offset)


class ReplicationQos:
    def __init__(self, level: int, gap: int, stall: float, narrow_every: float, now: float) -> None:
        """`gap`: sends a replica may lack to enter semi_sync (and the first window); `stall`: seconds
        without an ack before a replica stops counting (ha_max_time_slave_not_catchup)."""
        if level not in (0, 1, 2):
            raise ValueError(f"replication QoS level must be 0, 1 or 2, not {level}")
        self.level = level
        self.gap = gap
        self.stall = stall
        self.narrow_every = narrow_every
        self.sends = SendLog(gap)
        self.state = QosState.SINGLE_MASTER
        self.window = gap
        self._since = now  # when the state was entered

    @property
    def holds_sends(self) -> bool:
        """Whether a send waits for replicas now."""
        return self.state in (QosState.SEMI_SYNC, QosState.SYNC)

    def step(self, replicas: list[ReplicaProgress], now: float, *, synced: bool) -> QosState:
        """The state the group is in now; `replicas`: the connected ones; `synced`: whether the
        SyncStateSet holds a replica (connected or not: while it is a member, it could be elected,
        so sends wait for it until the set shrinks)."""
        new = self._next(replicas, now, synced)
        if new is not self.state:
            self.state, self._since = new, now
        if new is QosState.SEMI_SYNC:
            self.window = self.gap >> int((now - self._since) / self.narrow_every + 1e-9)
        return new

    def _next(self, replicas: list[ReplicaProgress], now: float, synced: bool) -> QosState:
        if self.level == 2 and synced:
            return QosState.SYNC
        if not replicas:
            return QosState.SINGLE_MASTER
        if self.level < 2:
            return QosState.ASYNC
        gap = self.sends.gap
        fresh = [r for r in replicas if now - r.last_ack <= self.stall or gap(r.acked) == 0]
        if self.state is QosState.SEMI_SYNC:
            return QosState.SEMI_SYNC if fresh else QosState.ASYNC
        if any(gap(r.acked) <= self.gap for r in fresh):
            return QosState.SEMI_SYNC
        return QosState.ASYNC

    def join_at(self) -> int | None:
        """The offset a replica must reach to be proposed for the SyncStateSet at level 2: every
        acknowledged send once the semi-sync window is closed, none before; in sync, the
        SyncStateSet's own rule (None), as at levels 0 and 1."""
        if self.level < 2 or self.state is QosState.SYNC:
            return None
        if self.state is QosState.SEMI_SYNC and self.window == 0:
            return self.sends.acknowledged
        return NEVER
