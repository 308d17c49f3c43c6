"""Brokers' requests to gRPC clients, relayed down their Telemetry streams as the v2 server
commands (RocketMQ proxy's GrpcClientChannel): CHECK_TRANSACTION_STATE for an orphaned half message
→ RecoverOrphanedTransactionCommand to a live producer of its group, whose checker answers with
EndTransaction (source SERVER_CHECK); GET_CONSUMER_RUNNING_INFO → PrintThreadStackTraceCommand and
CONSUME_MESSAGE_DIRECTLY → VerifyMessageCommand, whose answers (matched by nonce) become the
remoting answer — or, if the client says nothing within `answer_timeout_s`, an error saying so."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from ferrymq.messaging.api import SendOutcome
from ferrymq.protocol.bodies import ConsumeMessageDirectlyResult, ConsumerRunningInfo, encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.headers import (
    CheckTransactionStateRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
)
from ferrymq.protocol.message_ext import CompressedBodyError, decode_record, decompress_body
from ferrymq.protocol.properties import Prop
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.proxy.clients import LiveClient, LiveClients
from ferrymq.proxy.messages import to_message
from ferrymq.proxy.transactions import transaction_id
from ferrymq.proxy.v2 import messaging_pb2 as pb

log = logging.getLogger(__name__)

ANSWER_TIMEOUT_S = 3.0  # within the 5 s a broker gives a client to answer


class Relay:
    def __init__(self, clients: LiveClients, *, answer_timeout_s: float = ANSWER_TIMEOUT_S) -> None:
        self.clients = clients
        self.answer_timeout_s = answer_timeout_s
        self._waiting: dict[str, tuple[str, asyncio.Future[pb.TelemetryCommand]]] = {}  # nonce ->
        self._turn = 0  # producers of a group are asked in turn

    async def __call__(self, broker_name: str, request: RemotingCommand) -> RemotingCommand | None:
        """A broker's request to a client (messaging.api.ClientCalls)."""
        if request.code == RequestCode.CHECK_TRANSACTION_STATE:
            self.check_transaction(broker_name, request)
            return None
        if request.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            return await self.running_info(request)
        if request.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
            return await self.consume_directly(request)
        if request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:  # the proxy assigns 5.x consumers
            return None
        return request.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"code {request.code}")

    def answered(self, client_id: str, command: pb.TelemetryCommand) -> None:
        """A client's answer on its stream (thread_stack_trace, verify_message_result)."""
        kind = command.WhichOneof("command")
        nonce = (
            getattr(command, kind).nonce if kind in ("thread_stack_trace", "verify_message_result") else ""
        )
        waiting = self._waiting.get(nonce)
        if waiting is None or waiting[0] != client_id:
            log.info("telemetry %s from %s answers nothing asked (late?)", kind, client_id)
            return
        if not waiting[1].done():
            waiting[1].set_result(command)

    def check_transaction(self, broker_name: str, request: RemotingCommand) -> bool:
        """Ask a live producer of the half message's group; False if none is there to ask (the
        broker asks again at its next check)."""
        try:
            header = CheckTransactionStateRequestHeader.from_ext_fields(request.ext_fields or {})
            record = decode_record(request.body or b"")
            decompress_body(record)
        except (MessageDecodeError, CompressedBodyError, ValueError) as e:
            log.warning("bad CHECK_TRANSACTION_STATE from %s: %s", broker_name, e)
            return False
        group = record.properties.get(Prop.PGROUP, "")
        producers = self.clients.producers(group)
        if not producers or not header.offset_msg_id:
            log.info("no live producer of group %s to check transaction %s", group, header.msg_id)
            return False
        sent = SendOutcome(
            0, None, broker_name, record.queue_id, header.tran_state_table_offset, header.offset_msg_id
        )
        command = pb.TelemetryCommand()
        recover = command.recover_orphaned_transaction_command
        recover.message.CopyFrom(to_message(record))
        recover.transaction_id = transaction_id(sent)
        self._turn += 1
        return producers[self._turn % len(producers)].push(command)

    async def running_info(self, request: RemotingCommand) -> RemotingCommand:
        header = GetConsumerRunningInfoRequestHeader.from_ext_fields(request.ext_fields or {})
        client = self.clients.get(header.client_id)
        if client is None:
            return _not_online(request, header.client_id)
        command = pb.TelemetryCommand()
        command.print_thread_stack_trace_command.nonce = nonce = uuid.uuid4().hex
        answer = await self._ask(client, nonce, command)
        if answer is None:
            return self._no_answer(request, client)
        subscriptions = [s for c in client.registration.consumers for s in c.subscription_data_set]
        info = ConsumerRunningInfo(
            properties={"PROP_CLIENT_VERSION": "v2", "PROP_CONSUME_TYPE": "CONSUME_POP"},
            subscription_set=subscriptions, jstack=answer.thread_stack_trace.thread_stack_trace,
        )  # fmt: skip
        return request.make_response(ResponseCode.SUCCESS, None, body=encode_body(info))

    async def consume_directly(self, request: RemotingCommand) -> RemotingCommand:
        header = ConsumeMessageDirectlyResultRequestHeader.from_ext_fields(request.ext_fields or {})
        client = self.clients.get(header.client_id or "")
        if client is None:
            return _not_online(request, header.client_id or "")
        try:
            record = decode_record(request.body or b"")
            decompress_body(record)
        except (MessageDecodeError, CompressedBodyError) as e:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"message to consume: {e}")
        command = pb.TelemetryCommand()
        verify = command.verify_message_command
        verify.nonce = nonce = uuid.uuid4().hex
        verify.message.CopyFrom(to_message(record))
        started = time.monotonic()
        answer = await self._ask(client, nonce, command)
        if answer is None:
            return self._no_answer(request, client)
        consumed = not answer.HasField("status") or answer.status.code == pb.OK
        result = ConsumeMessageDirectlyResult(
            consume_result="CR_SUCCESS" if consumed else "CR_THROW_EXCEPTION",
            remark=answer.status.message or None,
            spent_time_mills=int((time.monotonic() - started) * 1000),
        )
        return request.make_response(ResponseCode.SUCCESS, None, body=encode_body(result))

    async def _ask(
        self, client: LiveClient, nonce: str, command: pb.TelemetryCommand
    ) -> pb.TelemetryCommand | None:
        """Push `command` to the client and wait for its answer with `nonce`; None if none came."""
        future: asyncio.Future[pb.TelemetryCommand] = asyncio.get_running_loop().create_future()
        self._waiting[nonce] = (client.client_id, future)
        try:
            if not client.push(command):
                return None
            async with asyncio.timeout(self.answer_timeout_s):
                return await future
        except TimeoutError:
            return None
        finally:
            del self._waiting[nonce]

    def _no_answer(self, request: RemotingCommand, client: LiveClient) -> RemotingCommand:
        return request.make_response(
            ResponseCode.SYSTEM_ERROR,
            f"the gRPC client {client.client_id} did not answer within {self.answer_timeout_s:g} s",
        )


def _not_online(request: RemotingCommand, client_id: str) -> RemotingCommand:
    return request.make_response(ResponseCode.SYSTEM_ERROR, f"the gRPC client {client_id} is not online")
