"""PUT/GET/DELETE_KV_CONFIG and GET_KVLIST_BY_NAMESPACE over the KVConfigStore."""

from __future__ import annotations

from ferrymq.namesrv.kv_config import KVConfigStore
from ferrymq.net import Connection, RemotingServer
from ferrymq.protocol.bodies import KVTable, encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import (
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    KVConfigRequestHeader,
    PutKVConfigRequestHeader,
)
from ferrymq.protocol.remoting import RemotingCommand


class KVConfigProcessor:
    def __init__(self, kv: KVConfigStore) -> None:
        self._kv = kv

    def register_with(self, server: RemotingServer) -> None:
        server.register(RequestCode.PUT_KV_CONFIG, self.put)
        server.register(RequestCode.GET_KV_CONFIG, self.get)
        server.register(RequestCode.DELETE_KV_CONFIG, self.delete)
        server.register(RequestCode.GET_KVLIST_BY_NAMESPACE, self.get_namespace)

    async def put(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = PutKVConfigRequestHeader.from_ext_fields(request.ext_fields)
        self._kv.put(header.namespace, header.key, header.value)
        return request.make_response(ResponseCode.SUCCESS)

    async def get(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = KVConfigRequestHeader.from_ext_fields(request.ext_fields)
        value = self._kv.get(header.namespace, header.key)
        if value is None:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND,
                f"No config item, Namespace: {header.namespace} Key: {header.key}",
            )
        return request.make_response(
            ResponseCode.SUCCESS, ext_fields=GetKVConfigResponseHeader(value).to_ext_fields()
        )

    async def delete(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = KVConfigRequestHeader.from_ext_fields(request.ext_fields)
        self._kv.delete(header.namespace, header.key)
        return request.make_response(ResponseCode.SUCCESS)

    async def get_namespace(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetKVListByNamespaceRequestHeader.from_ext_fields(request.ext_fields)
        table = self._kv.namespace(header.namespace)
        if table is None:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {header.namespace}"
            )
        return request.make_response(ResponseCode.SUCCESS, body=encode_body(KVTable(table)))
