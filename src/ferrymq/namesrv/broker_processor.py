"""What brokers call: REGISTER_BROKER every 30 s, UNREGISTER_BROKER on the way down, and
BROKER_HEARTBEAT / QUERY_DATA_VERSION, which keep a registration alive without re-sending topics."""

from __future__ import annotations

import zlib

from ferrymq.namesrv.kv_config import ORDER_TOPIC_CONFIG, KVConfigStore
from ferrymq.namesrv.route_table import RouteTable
from ferrymq.net import Connection, RemotingServer
from ferrymq.protocol.bodies import DataVersion, KVTable, RegisterBrokerBody, decode_body, encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import (
    BrokerHeartbeatRequestHeader,
    BrokerRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
)
from ferrymq.protocol.remoting import RemotingCommand


class BrokerProcessor:
    def __init__(self, routes: RouteTable, kv: KVConfigStore) -> None:
        self._routes = routes
        self._kv = kv

    def register_with(self, server: RemotingServer) -> None:
        server.register(RequestCode.REGISTER_BROKER, self.register_broker)
        server.register(RequestCode.UNREGISTER_BROKER, self.unregister_broker)
        server.register(RequestCode.BROKER_HEARTBEAT, self.broker_heartbeat)
        server.register(RequestCode.QUERY_DATA_VERSION, self.query_data_version)

    async def register_broker(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = RegisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
        # Java's UtilAll.crc32 keeps 31 bits, so that the value is never a negative int.
        if header.body_crc32 and zlib.crc32(request.body) & 0x7FFFFFFF != header.body_crc32:
            return request.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if header.compressed:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                "compressed registration is not supported: set compressedRegister=false",
            )
        body = decode_body(RegisterBrokerBody, request.body) if request.body else RegisterBrokerBody()
        result = self._routes.register_broker(header, body.topic_config_serialize_wrapper, connection)
        answer = RegisterBrokerResponseHeader(
            ha_server_addr=result.ha_server_addr, master_addr=result.master_addr
        )
        order_topics = KVTable(table=self._kv.namespace(ORDER_TOPIC_CONFIG) or {})
        return request.make_response(
            ResponseCode.SUCCESS, ext_fields=answer.to_ext_fields(), body=encode_body(order_topics)
        )

    async def unregister_broker(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = BrokerRequestHeader.from_ext_fields(request.ext_fields)
        self._routes.unregister_broker(header.cluster_name, header.broker_addr, header.broker_name)
        return request.make_response(ResponseCode.SUCCESS)

    async def broker_heartbeat(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = BrokerHeartbeatRequestHeader.from_ext_fields(request.ext_fields)
        self._routes.heartbeat(header.cluster_name, header.broker_addr)
        return request.make_response(ResponseCode.SUCCESS)

    async def query_data_version(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        """Whether the broker's topic table differs from what we hold, so it re-registers only then."""
        header = BrokerRequestHeader.from_ext_fields(request.ext_fields)
        theirs = decode_body(DataVersion, request.body) if request.body else DataVersion()
        ours = self._routes.data_version(header.cluster_name, header.broker_addr)
        self._routes.heartbeat(header.cluster_name, header.broker_addr)
        answer = QueryDataVersionResponseHeader(changed=ours != theirs)
        return request.make_response(
            ResponseCode.SUCCESS,
            ext_fields=answer.to_ext_fields(),
            body=encode_body(ours) if ours is not None else b"",
        )
