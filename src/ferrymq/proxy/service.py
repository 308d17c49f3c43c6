"""The MessagingService servicer: each RPC handed to the module that serves it, over one
MessageService (local or remote). RPCs not defined here (lite subscriptions) answer gRPC
UNIMPLEMENTED, which clients raise at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from ferrymq.messaging.api import MessageService
from ferrymq.proxy import consumer, offsets, producer, pull, recall, routes, telemetry, transactions
from ferrymq.proxy.clients import LiveClients
from ferrymq.proxy.relay import Relay
from ferrymq.proxy.renewal import Renewals
from ferrymq.proxy.status import OK
from ferrymq.proxy.v2 import messaging_pb2 as pb
from ferrymq.proxy.v2 import messaging_pb2_grpc as pb_grpc

CLIENT_ID_HEADER = "x-mq-client-id"


def client_id(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_HEADER:
            return str(value)
    return ""


class MessagingServicer(pb_grpc.MessagingServiceServicer):
    def __init__(
        self, service: MessageService, endpoints: pb.Endpoints, renewals: Renewals, clients: LiveClients,
        relay: Relay,
    ) -> None:  # fmt: skip
        self.service = service
        self.renewals = renewals
        self.clients = clients
        self.relay = relay
        self.endpoints = endpoints  # where clients reach this proxy, when they do not say

    async def QueryRoute(self, request, context):
        return await routes.query_route(self.service, request, self.endpoints)

    async def QueryAssignment(self, request, context):
        return await routes.query_assignment(self.service, request, self.endpoints)

    async def Heartbeat(self, request, context):
        return pb.HeartbeatResponse(status=OK)

    async def NotifyClientTermination(self, request, context):
        self.renewals.forget_client(client_id(context))
        unregistering = self.clients.forget(client_id(context))
        if unregistering is not None:  # the brokers forget it before the client is told it is done
            await asyncio.shield(unregistering)
        return pb.NotifyClientTerminationResponse(status=OK)

    async def SendMessage(self, request, context):
        return await producer.send_message(self.service, request)

    async def ReceiveMessage(self, request, context) -> AsyncIterator[pb.ReceiveMessageResponse]:
        async for response in consumer.receive_message(
            self.service, self.renewals, request, client_id(context), context.time_remaining()
        ):
            yield response

    async def AckMessage(self, request, context):
        return await consumer.ack_message(self.service, self.renewals, request)

    async def ChangeInvisibleDuration(self, request, context):
        return await consumer.change_invisible_duration(self.service, self.renewals, request)

    async def ForwardMessageToDeadLetterQueue(self, request, context):
        return await consumer.forward_to_dead_letter_queue(self.service, self.renewals, request)

    async def PullMessage(self, request, context) -> AsyncIterator[pb.PullMessageResponse]:
        async for response in pull.pull_message(self.service, request, context.time_remaining()):
            yield response

    async def UpdateOffset(self, request, context):
        return await offsets.update_offset(self.service, request)

    async def GetOffset(self, request, context):
        return await offsets.get_offset(self.service, request)

    async def QueryOffset(self, request, context):
        return await offsets.query_offset(self.service, request)

    async def RecallMessage(self, request, context):
        return await recall.recall_message(self.service, request)

    async def EndTransaction(self, request, context):
        return await transactions.end_transaction(self.service, request)

    async def Telemetry(self, request_iterator, context) -> AsyncIterator[pb.TelemetryCommand]:
        client = client_id(context)
        try:
            async for command in telemetry.serve(
                self.service, self.clients, self.relay, client, request_iterator
            ):
                yield command
        finally:  # the client closed its stream or went away
            self.renewals.forget_client(client)
