"""The controller's replicated state: per broker set, its brokers, master, epochs and SyncStateSet.

Pure logic, the shape of RocketMQ's ReplicasInfoManager: each request is checked against the state
and yields a ``Decision`` (the answer, and the events that would change the state); only events
committed through Raft are applied, by ``apply``, on every controller alike. Events are plain tuples
(they travel through the Raft log) and carry the epochs they were decided at, so an event decided on
a state that has moved on since is ignored everywhere rather than applied twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ferrymq.controller.elect import Standing, elect
from ferrymq.protocol.bodies import Body
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.controller import (
    BrokerMemberGroup,
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    GetNextBrokerIdResponseHeader,
    MasterInfoHeader,
    RegisterBrokerToControllerResponseHeader,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
)
from ferrymq.protocol.headers import CustomHeader

FIRST_BROKER_ID = 1  # RocketMQ's MixAll.FIRST_BROKER_CONTROLLER_ID

Event = tuple
Alive = Callable[[str, int], bool]
"""alive(broker_name, broker_id)"""
StandingOf = Callable[[str, int], Standing]


@dataclass
class BrokerSet:
    cluster_name: str
    broker_name: str
    addresses: dict[int, str] = field(default_factory=dict)  # broker id → "host:port"
    check_codes: dict[int, str] = field(default_factory=dict)  # broker id → its register check code
    master_id: int | None = None
    master_epoch: int = 0
    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0

    @property
    def next_broker_id(self) -> int:
        return max(self.addresses, default=FIRST_BROKER_ID - 1) + 1

    def master_info(self) -> MasterInfoHeader:
        return MasterInfoHeader(
            self.master_id,
            self.addresses.get(self.master_id) if self.master_id is not None else None,
            self.master_epoch,
            self.sync_state_set_epoch,
        )

    def member_group(self) -> BrokerMemberGroup:
        return BrokerMemberGroup(self.cluster_name, self.broker_name, dict(self.addresses))


@dataclass
class Decision:
    """The answer to one request, and the events to commit before giving it."""

    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    header: CustomHeader | None = None
    body: Body | None = None
    events: list[Event] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.code == ResponseCode.SUCCESS


def _refuse(code: int, remark: str, header: CustomHeader | None = None) -> Decision:
    return Decision(code, remark, header)


class ReplicasState:
    def __init__(self) -> None:
        self.sets: dict[str, BrokerSet] = {}
        self.controller_addresses: dict[str, str] = {}  # Raft node id → remoting address

    # --- Broker ids -------------------------------------------------------------------------

    def next_broker_id(self, cluster: str, name: str) -> Decision:
        found = self.sets.get(name)
        next_id = found.next_broker_id if found else FIRST_BROKER_ID
        return Decision(header=GetNextBrokerIdResponseHeader(cluster, name, next_id))

    def apply_broker_id(self, cluster: str, name: str, broker_id: int, check_code: str) -> Decision:
        found = self.sets.get(name)
        event = ("apply_id", cluster, name, broker_id, check_code.split(";")[0], check_code)
        if found is None:
            if broker_id == FIRST_BROKER_ID:
                return Decision(events=[event])
            return _refuse(
                ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                f"broker set {name} is new: its first broker id is {FIRST_BROKER_ID}, not {broker_id}",
            )
        if broker_id not in found.addresses or found.check_codes.get(broker_id) == check_code:
            return Decision(events=[event])
        return _refuse(
            ResponseCode.CONTROLLER_BROKER_ID_INVALID,
            f"broker id {broker_id} of {name} belongs to another broker",
        )

    def register_broker(
        self, cluster: str, name: str, broker_id: int, address: str, alive: Alive
    ) -> Decision:
        found = self.sets.get(name)
        if found is None or broker_id not in found.addresses:
            return _refuse(
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker id {broker_id} of broker set {name} has not been applied for",
            )
        header = RegisterBrokerToControllerResponseHeader(cluster_name=cluster, broker_name=name)
        if found.master_id is not None and alive(name, found.master_id):
            info = found.master_info()
            header.master_broker_id, header.master_address = info.master_broker_id, info.master_address
            header.master_epoch, header.sync_state_set_epoch = info.master_epoch, info.sync_state_set_epoch
        decision = Decision(header=header, body=self._sync_state_set(found))
        if found.addresses[broker_id] != address:
            decision.events.append(("update_address", name, broker_id, address))
        return decision

    # --- Election and SyncStateSet ------------------------------------------------------------

    def elect_master(
        self,
        name: str,
        broker_id: int,
        designate: bool,
        alive: Alive,
        standing: StandingOf,
        unclean: bool = False,
    ) -> Decision:
        """CONTROLLER_ELECT_MASTER: from a broker (broker_id = itself), an admin, or the controller (-1)."""
        found = self.sets.get(name)
        if found is None:
            return _refuse(
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"broker set {name} is unknown"
            )
        new_master: int | None = None
        if found.master_epoch == 0 and broker_id in found.addresses:
            new_master = broker_id  # the set's first election: whoever asks first
        if new_master is None:
            new_master = elect(
                found.sync_state_set,
                found.addresses if unclean else None,
                found.master_id,
                broker_id if designate else None,
                lambda b: alive(name, b),
                lambda b: standing(name, b),
            )
        if new_master is not None and new_master == found.master_id:
            return Decision(
                ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                f"master {new_master} of {name} is still alive: nothing to elect",
                found.master_info(),
                ElectMasterResponseBody(found.member_group(), set(found.sync_state_set)),
            )
        if new_master is not None:
            header = MasterInfoHeader(
                new_master,
                found.addresses[new_master],
                found.master_epoch + 1,
                found.sync_state_set_epoch + 1,
            )
            body = ElectMasterResponseBody(found.member_group(), {new_master})
            return Decision(
                header=header, body=body, events=[("elect", name, new_master, found.master_epoch)]
            )
        if broker_id == -1:  # the master is gone and nobody may follow it: record that there is none
            decision = _refuse(
                ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
                f"the master of {name} is gone and no replica of its SyncStateSet is alive",
            )
            if found.master_id is not None:
                decision.events.append(("elect", name, None, found.master_epoch))
            return decision
        return _refuse(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED, f"no broker of {name} may become master")

    def alter_sync_state_set(
        self, name: str, master_id: int, master_epoch: int, proposed: SyncStateSet, alive: Alive
    ) -> Decision:
        found = self.sets.get(name)
        if found is None:
            return _refuse(
                ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, f"broker set {name} is unknown"
            )
        new_set = set(proposed.sync_state_set)
        if new_set == found.sync_state_set:
            return _refuse(
                ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "the SyncStateSet is unchanged"
            )
        if found.master_id != master_id:
            return _refuse(
                ResponseCode.CONTROLLER_INVALID_MASTER,
                f"the master of {name} is {found.master_id}, not {master_id}",
            )
        if master_epoch != found.master_epoch:
            return _refuse(
                ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                f"the master epoch of {name} is {found.master_epoch}, not {master_epoch}",
            )
        if proposed.sync_state_set_epoch != found.sync_state_set_epoch:
            return _refuse(
                ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                f"the SyncStateSet epoch of {name} is {found.sync_state_set_epoch}, "
                f"not {proposed.sync_state_set_epoch}",
            )
        for replica in sorted(new_set):
            if replica not in found.addresses:
                return _refuse(
                    ResponseCode.CONTROLLER_INVALID_REPLICAS, f"replica {replica} of {name} is unknown"
                )
            if not alive(name, replica):
                return _refuse(
                    ResponseCode.CONTROLLER_BROKER_NOT_ALIVE, f"replica {replica} of {name} is not alive"
                )
        if master_id not in new_set:
            return _refuse(
                ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                f"the SyncStateSet must keep the master {master_id}",
            )
        epoch = found.sync_state_set_epoch + 1
        return Decision(
            header=None,
            body=SyncStateSet(new_set, epoch),
            events=[("alter", name, frozenset(new_set), found.sync_state_set_epoch, master_epoch)],
        )

    # --- Reads --------------------------------------------------------------------------------

    def replica_info(self, name: str) -> Decision:
        found = self.sets.get(name)
        if found is None:
            return _refuse(ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"broker set {name} is unknown")
        return Decision(header=found.master_info(), body=self._sync_state_set(found))

    def sync_state_data(self, names: Iterable[str], alive: Alive) -> BrokerReplicasInfo:
        table = {}
        for name in names:
            found = self.sets.get(name)
            if found is None:
                continue
            info = found.master_info()
            replicas = ReplicasInfo(
                info.master_broker_id, info.master_address, found.master_epoch, found.sync_state_set_epoch
            )
            for broker_id, address in sorted(found.addresses.items()):
                identity = ReplicaIdentity(name, broker_id, address, alive(name, broker_id))
                in_sync = broker_id in found.sync_state_set
                (replicas.in_sync_replicas if in_sync else replicas.not_in_sync_replicas).append(identity)
            table[name] = replicas
        return BrokerReplicasInfo(table)

    def need_reelection(self, alive: Alive) -> list[str]:
        """Sets whose master is gone while some replica is still alive."""
        return [
            name
            for name, s in self.sets.items()
            if s.master_id is not None
            and not alive(name, s.master_id)
            and any(alive(name, b) for b in s.addresses)
        ]

    def clean_broker_data(
        self, name: str, ids: set[int] | None, clean_living: bool, alive: Alive
    ) -> Decision:
        found = self.sets.get(name)
        if found is None:
            return _refuse(
                ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, f"broker set {name} is unknown"
            )
        if not clean_living:
            if ids is None and found.master_id is not None:
                return _refuse(
                    ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    f"broker set {name} still has a master",
                )
            living = sorted(b for b in ids or () if alive(name, b))
            if living:
                return _refuse(
                    ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    f"brokers {living} of {name} are alive",
                )
        return Decision(events=[("clean", name, frozenset(ids) if ids is not None else None)])

    @staticmethod
    def _sync_state_set(found: BrokerSet) -> SyncStateSet:
        return SyncStateSet(set(found.sync_state_set), found.sync_state_set_epoch)

    # --- Applying committed events --------------------------------------------------------------

    def apply(self, event: Event) -> bool:
        """Change the state by one committed event; False when it was decided on a state now gone."""
        kind, args = event[0], event[1:]
        return getattr(self, f"_apply_{kind}")(*args)

    def _apply_apply_id(self, cluster: str, name: str, broker_id: int, address: str, check_code: str) -> bool:
        found = self.sets.setdefault(name, BrokerSet(cluster, name))
        if broker_id in found.addresses and found.check_codes.get(broker_id) != check_code:
            return False
        found.addresses[broker_id] = address
        found.check_codes[broker_id] = check_code
        return True

    def _apply_update_address(self, name: str, broker_id: int, address: str) -> bool:
        found = self.sets.get(name)
        if found is None or broker_id not in found.addresses:
            return False
        found.addresses[broker_id] = address
        return True

    def _apply_elect(self, name: str, new_master: int | None, decided_at_epoch: int) -> bool:
        found = self.sets.get(name)
        if found is None or found.master_epoch != decided_at_epoch:
            return False
        if new_master is None:
            found.master_id = None
            return True
        found.master_id = new_master
        found.master_epoch += 1
        found.sync_state_set = {new_master}
        found.sync_state_set_epoch += 1
        return True

    def _apply_alter(self, name: str, new_set: frozenset[int], decided_at: int, master_epoch: int) -> bool:
        found = self.sets.get(name)
        if found is None or found.sync_state_set_epoch != decided_at or found.master_epoch != master_epoch:
            return False
        found.sync_state_set = set(new_set)
        found.sync_state_set_epoch += 1
        return True

    def _apply_clean(self, name: str, ids: frozenset[int] | None) -> bool:
        found = self.sets.get(name)
        if found is None:
            return False
        if ids is None:
            del self.sets[name]
            return True
        for broker_id in ids:
            found.addresses.pop(broker_id, None)
            found.check_codes.pop(broker_id, None)
            found.sync_state_set.discard(broker_id)
        if not found.addresses:
            del self.sets[name]
        return True

    def _apply_barrier(self) -> bool:
        """A new leader's first commit: once it is applied, everything committed before it is too."""
        return True

    def _apply_controller_address(self, node_id: str, address: str) -> bool:
        self.controller_addresses[node_id] = address
        return True
