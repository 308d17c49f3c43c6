"""Headers and bodies of the controller-mode requests (RIP-44), with RocketMQ's field names.

Kept apart from ``headers.py``/``bodies.py`` because only the controller, the brokers' replicas
manager and the admin tools speak them.
"""

from __future__ import annotations

import msgspec

from ferrymq.protocol.bodies import Body
from ferrymq.protocol.headers import CustomHeader, Int, Long

# --- Headers ----------------------------------------------------------------------------------


class BrokerSetRequestHeader(CustomHeader):
    """CONTROLLER_GET_NEXT_BROKER_ID; also the shape of APPLY_BROKER_ID's answer."""

    cluster_name: str
    broker_name: str


class GetNextBrokerIdResponseHeader(BrokerSetRequestHeader):
    next_broker_id: Long | None = None


class ApplyBrokerIdRequestHeader(BrokerSetRequestHeader):
    applied_broker_id: Long
    register_check_code: str  # "brokerAddress;random", proves a later re-apply comes from the same broker


class RegisterBrokerToControllerRequestHeader(BrokerSetRequestHeader):
    broker_id: Long
    broker_address: str
    invoke_time: Long = 0


class MasterInfoHeader(CustomHeader):
    """The master of a broker set as the controller knows it (absent fields: no master now).

    Also the header of NOTIFY_BROKER_ROLE_CHANGED (whose body is the ``SyncStateSet``)."""

    master_broker_id: Long | None = None
    master_address: str | None = None
    master_epoch: Int | None = None
    sync_state_set_epoch: Int | None = None


class RegisterBrokerToControllerResponseHeader(MasterInfoHeader):
    cluster_name: str | None = None
    broker_name: str | None = None


class GetReplicaInfoRequestHeader(CustomHeader):
    broker_name: str


class ElectMasterRequestHeader(CustomHeader):
    cluster_name: str = ""
    broker_name: str = ""
    broker_id: Long = -1  # -1: the controller itself asks (its master is gone)
    designate_elect: bool = False  # elect exactly broker_id (admin's manual switch)
    invoke_time: Long = 0


class AlterSyncStateSetRequestHeader(CustomHeader):
    broker_name: str
    master_broker_id: Long
    master_epoch: Int
    invoke_time: Long = 0


class AlterSyncStateSetResponseHeader(CustomHeader):
    new_sync_state_set_epoch: Int = 0


class GetMetaDataResponseHeader(CustomHeader):
    group: str | None = None
    controller_leader_id: str | None = None
    controller_leader_address: str | None = None
    is_leader: bool = False
    peers: str | None = None


class CleanControllerBrokerDataRequestHeader(CustomHeader):
    cluster_name: str
    broker_name: str
    broker_controller_ids_to_clean: str | None = None  # "1;2"; none: the whole broker set
    is_clean_living_broker: bool = False
    invoke_time: Long = 0


# --- Bodies -----------------------------------------------------------------------------------


class SyncStateSet(Body):
    sync_state_set: set[int] = msgspec.field(default_factory=set)
    sync_state_set_epoch: int = 0


class BrokerMemberGroup(Body):
    cluster: str = ""
    broker_name: str = ""
    broker_addrs: dict[int, str] = msgspec.field(default_factory=dict)


class ElectMasterResponseBody(Body):
    broker_member_group: BrokerMemberGroup | None = None
    sync_state_set: set[int] = msgspec.field(default_factory=set)


class ReplicaIdentity(Body):
    broker_name: str
    broker_id: int
    broker_address: str
    alive: bool = False


class ReplicasInfo(Body):
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int = 0
    sync_state_set_epoch: int = 0
    in_sync_replicas: list[ReplicaIdentity] = msgspec.field(default_factory=list)
    not_in_sync_replicas: list[ReplicaIdentity] = msgspec.field(default_factory=list)


class BrokerReplicasInfo(Body):
    """Answer of CONTROLLER_GET_SYNC_STATE_DATA (request body: a JSON list of broker names)."""

    replicas_info_table: dict[str, ReplicasInfo] = msgspec.field(default_factory=dict)
