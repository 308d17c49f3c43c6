"""Which replicas are in sync with the master: the SyncStateSet, shrunk and expanded by their acks.

Pure logic over an injected clock, so it is tested without sockets or sleeping. RocketMQ's rules:
a replica counts as caught up when its ack reaches the master's max offset as of the transfer before
(its "last caught-up time"); a member not caught up for `max_not_catchup` seconds (disconnected ones
included) is proposed for removal; a replica whose ack reaches the confirm offset (the lowest ack in
the set, the master counting as its max offset) is proposed for addition. The set always holds the
master. Who applies a proposal is the owner's business (the master itself in static mode, the
controller in controller mode).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Replica:
    acked: int = -1
    connected: bool = False
    last_caught_up: float = 0.0
    target: int = 0  # the master's max offset when data was last sent: reaching it means caught up
    target_time: float = 0.0
    last_ack: float = 0.0


class SyncStateTracker:
    def __init__(self, master_id: int, max_not_catchup: float, now: float) -> None:
        self.master_id = master_id
        self.max_not_catchup = max_not_catchup
        self.sync_state_set: set[int] = {master_id}
        self.epoch = 0
        self.replicas: dict[int, Replica] = {}
        self._started = now

    def connected(self, broker_id: int, now: float) -> None:
        r = self.replicas.setdefault(broker_id, Replica(last_caught_up=now))
        r.connected, r.last_ack = True, now

    def disconnected(self, broker_id: int) -> None:
        r = self.replicas.get(broker_id)
        if r is not None:
            r.connected = False

    def transferred(self, broker_id: int, master_max: int, now: float) -> None:
        """The master sent this replica data (or a heartbeat) while its log ended at `master_max`."""
        r = self.replicas.get(broker_id)
        if r is not None:
            r.target, r.target_time = master_max, now

    def acked(self, broker_id: int, offset: int, now: float) -> None:
        r = self.replicas.get(broker_id)
        if r is None:
            return
        r.acked, r.last_ack = offset, now
        if offset >= r.target:
            r.last_caught_up = max(r.last_caught_up, r.target_time or now)

    def apply(self, members: set[int], epoch: int) -> None:
        """Adopt a SyncStateSet decided elsewhere (or the master's own proposal); the master stays in."""
        self.sync_state_set = set(members) | {self.master_id}
        self.epoch = epoch

    def acked_offset(self, broker_id: int) -> int:
        r = self.replicas.get(broker_id)
        return r.acked if r is not None and r.connected else -1

    def confirm_offset(self, master_max: int, members: set[int] | None = None) -> int:
        """The lowest offset every SyncStateSet member has (the master has everything it wrote)."""
        members = self.sync_state_set if members is None else members
        return max(0, min(master_max if i == self.master_id else self.acked_offset(i) for i in members))

    def proposal(self, master_max: int, now: float, join_at: int | None = None) -> set[int] | None:
        """The SyncStateSet the rules want now, or None if it is the current one. `join_at`: the offset
        a replica must have acked to join (the replication QoS's); default: the confirm offset."""
        members = set(self.sync_state_set)
        for broker_id in list(members - {self.master_id}):
            r = self.replicas.get(broker_id)
            last = r.last_caught_up if r is not None else self._started
            if (r is None or not r.connected or r.acked < master_max) and now - last > self.max_not_catchup:
                members.discard(broker_id)
        confirm = self.confirm_offset(master_max, members) if join_at is None else join_at
        for broker_id, r in self.replicas.items():
            if broker_id not in self.sync_state_set and r.connected and r.acked >= confirm:
                members.add(broker_id)
        return None if members == self.sync_state_set else members
