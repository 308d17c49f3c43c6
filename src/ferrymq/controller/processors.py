"""The controller's request handlers: one per request code, thin over the state and the Raft group.

Writes and the reads a broker bases its role on go to the leader (others answer CONTROLLER_NOT_LEADER
naming the leader); BROKER_HEARTBEAT and GET_METADATA_INFO are answered by every node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ferrymq.controller.elect import Standing
from ferrymq.net import Connection, RemotingServer
from ferrymq.protocol.bodies import decode_body, encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.controller import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    BrokerSetRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    GetMetaDataResponseHeader,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
)
from ferrymq.protocol.headers import BrokerHeartbeatRequestHeader
from ferrymq.protocol.remoting import RemotingCommand, RemotingProtocolError

if TYPE_CHECKING:
    from ferrymq.controller.server import Controller

_names_decoder = msgspec.json.Decoder(list[str])


class ControllerProcessor:
    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def register_with(self, server: RemotingServer) -> None:
        for code, handler in (
            (RequestCode.BROKER_HEARTBEAT, self.heartbeat),
            (RequestCode.CONTROLLER_GET_METADATA_INFO, self.metadata),
            (RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, self.next_broker_id),
            (RequestCode.CONTROLLER_APPLY_BROKER_ID, self.apply_broker_id),
            (RequestCode.CONTROLLER_REGISTER_BROKER, self.register_broker),
            (RequestCode.CONTROLLER_ELECT_MASTER, self.elect_master),
            (RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, self.alter_sync_state_set),
            (RequestCode.CONTROLLER_GET_REPLICA_INFO, self.replica_info),
            (RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, self.sync_state_data),
            (RequestCode.CLEAN_BROKER_DATA, self.clean_broker_data),
        ):
            server.register(code, handler)

    async def heartbeat(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        h = BrokerHeartbeatRequestHeader.from_ext_fields(request.ext_fields)
        if h.broker_id is None:
            return request.make_response(
                ResponseCode.CONTROLLER_INVALID_REQUEST, "heartbeat without brokerId"
            )
        self.controller.liveness.heartbeat(
            (h.broker_name, h.broker_id),
            h.broker_addr,
            timeout=(h.heartbeat_timeout_mills or 0) / 1000,
            standing=Standing(h.epoch or 0, h.max_offset or 0, h.election_priority or 0),
            confirm_offset=h.confirm_offset or 0,
            connection=connection,
        )
        return request.make_response(ResponseCode.SUCCESS, "heartbeat success")

    async def metadata(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        c = self.controller
        header = GetMetaDataResponseHeader(
            group="ferrymq-controller",
            controller_leader_id=c.leader_id(),
            controller_leader_address=c.leader_address(),
            is_leader=c.is_leader,
            peers=";".join(f"{n}@{a}" for n, a in c.config.peers.items()),
        )
        return request.make_response(ResponseCode.SUCCESS, ext_fields=header.to_ext_fields())

    async def next_broker_id(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        h = BrokerSetRequestHeader.from_ext_fields(request.ext_fields)
        return await self.controller.decide(
            request, lambda s: s.next_broker_id(h.cluster_name, h.broker_name)
        )

    async def apply_broker_id(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ApplyBrokerIdRequestHeader.from_ext_fields(request.ext_fields)
        response = await self.controller.decide(
            request,
            lambda s: s.apply_broker_id(
                h.cluster_name, h.broker_name, h.applied_broker_id, h.register_check_code
            ),
        )
        if response.code == ResponseCode.SUCCESS:
            response.ext_fields = BrokerSetRequestHeader(h.cluster_name, h.broker_name).to_ext_fields()
        return response

    async def register_broker(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        h = RegisterBrokerToControllerRequestHeader.from_ext_fields(request.ext_fields)
        return await self.controller.decide(
            request,
            lambda s: s.register_broker(
                h.cluster_name, h.broker_name, h.broker_id, h.broker_address, self.controller.alive
            ),
        )

    async def elect_master(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ElectMasterRequestHeader.from_ext_fields(request.ext_fields)
        decision = await self.controller.elect(h.broker_name, h.broker_id, h.designate_elect)
        return self.controller.answer(request, decision)

    async def alter_sync_state_set(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        h = AlterSyncStateSetRequestHeader.from_ext_fields(request.ext_fields)
        proposed = decode_body(SyncStateSet, request.body)
        response = await self.controller.decide(
            request,
            lambda s: s.alter_sync_state_set(
                h.broker_name, h.master_broker_id, h.master_epoch, proposed, self.controller.alive
            ),
        )
        if response.code == ResponseCode.SUCCESS:
            epoch = decode_body(SyncStateSet, response.body).sync_state_set_epoch
            response.ext_fields = AlterSyncStateSetResponseHeader(epoch).to_ext_fields()
        return response

    async def replica_info(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        h = GetReplicaInfoRequestHeader.from_ext_fields(request.ext_fields)
        return await self.controller.decide(request, lambda s: s.replica_info(h.broker_name))

    async def sync_state_data(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        c = self.controller
        if not c.is_leader:
            return c.not_leader(request)
        try:
            names = _names_decoder.decode(request.body) if request.body else None
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise RemotingProtocolError(
                f"GET_SYNC_STATE_DATA body must be a JSON list of names: {exc}"
            ) from None
        assert c.raft is not None
        with c.raft.reading() as state:
            body = state.sync_state_data(state.sets if names is None else names, c.alive)
        return request.make_response(ResponseCode.SUCCESS, body=encode_body(body))

    async def clean_broker_data(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        h = CleanControllerBrokerDataRequestHeader.from_ext_fields(request.ext_fields)
        try:
            ids = (
                {int(i) for i in h.broker_controller_ids_to_clean.split(";") if i.strip()}
                if h.broker_controller_ids_to_clean
                else None
            )
        except ValueError:
            return request.make_response(
                ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                f"brokerControllerIdsToClean must be ids joined by ';': {h.broker_controller_ids_to_clean!r}",
            )
        return await self.controller.decide(
            request,
            lambda s: s.clean_broker_data(
                h.broker_name, ids, h.is_clean_living_broker, self.controller.alive
            ),
        )
