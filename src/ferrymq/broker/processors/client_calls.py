"""Admin requests a broker passes on to one consumer over the channel it heartbeats on, and whose
answer it passes back: GET_CONSUMER_RUNNING_INFO, and CONSUME_MESSAGE_DIRECTLY with the stored
message (found by its offset message id) as the body for the consumer to consume."""

from __future__ import annotations

from ferrymq.broker.clients import Channel, ClientRegistry
from ferrymq.broker.processors.common import error
from ferrymq.net.connection import Connection
from ferrymq.net.errors import RemotingError
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
)
from ferrymq.protocol.message_id import parse_offset_msg_id
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.store import MessageStore

CLIENT_TIMEOUT_S = 5.0  # how long a consumer has to answer (RocketMQ's callClient)


class ClientCallProcessor:
    def __init__(self, clients: ClientRegistry, store: MessageStore) -> None:
        self.clients = clients
        self.store = store

    def register(self, server) -> None:
        server.register(RequestCode.GET_CONSUMER_RUNNING_INFO, self.running_info)
        server.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, self.consume_directly)

    def _channel(self, group: str, client_id: str) -> Channel | None:
        consumers = self.clients.consumers.get(group)
        member = consumers.members.get(client_id) if consumers else None
        return member.connection if member else None

    async def running_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = GetConsumerRunningInfoRequestHeader.from_ext_fields(request.ext_fields)
        return await self._pass_on(request, h.consumer_group, h.client_id, request.body)

    async def consume_directly(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ConsumeMessageDirectlyResultRequestHeader.from_ext_fields(request.ext_fields)
        try:
            _, _, offset = parse_offset_msg_id(h.msg_id or "")
        except MessageDecodeError as e:
            return error(request, ResponseCode.SYSTEM_ERROR, f"message id {h.msg_id!r}: {e}")
        record = self.store.look_message_by_offset(offset)
        if record is None:
            return error(request, ResponseCode.SYSTEM_ERROR, f"no message {h.msg_id} on this broker")
        return await self._pass_on(request, h.consumer_group, h.client_id or "", bytes(record))

    async def _pass_on(
        self, request: RemotingCommand, group: str, client_id: str, body: bytes | memoryview | None
    ) -> RemotingCommand:
        channel = self._channel(group, client_id)
        if channel is None:
            return error(
                request, ResponseCode.SYSTEM_ERROR, f"the consumer {client_id} of {group} is not online"
            )
        call = RemotingCommand(request.code, ext_fields=dict(request.ext_fields or {}), body=body or b"")
        try:
            answer = await channel.request(call, CLIENT_TIMEOUT_S)
        except RemotingError as e:
            return error(request, ResponseCode.SYSTEM_ERROR, f"the consumer {client_id} did not answer: {e}")
        return request.make_response(answer.code, answer.remark, answer.ext_fields, answer.body or b"")
