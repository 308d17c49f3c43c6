"""A gRPC (v2) load driver for the proxy: batched SendMessage, and ReceiveMessage + one AckMessage
per received batch, `inflight` calls at once, with the proxy's own stubs (no 5.x client library, so
the client side costs little next to the proxy it measures)."""

from __future__ import annotations

import asyncio
import itertools
import os
import time

import grpc

from ferrymq.proxy.v2 import messaging_pb2 as pb
from ferrymq.proxy.v2 import messaging_pb2_grpc as pb_grpc

MAX_MESSAGE_BYTES = 130 * 1024 * 1024


class GrpcLoad:
    def __init__(self, proxy: str) -> None:
        self.channel = grpc.aio.insecure_channel(
            proxy,
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        self.stub = pb_grpc.MessagingServiceStub(self.channel)
        self.metadata = (("x-mq-client-id", f"grpc-load-{os.getpid()}-{time.time_ns()}"),)
        self._ids = itertools.count()
        self._prefix = os.urandom(4).hex().upper()

    async def close(self) -> None:
        await self.channel.close()

    def send_request(self, topic: str, body: bytes, n: int) -> pb.SendMessageRequest:
        """`n` messages of one topic, each with its own message id (as a client gives them)."""
        request = pb.SendMessageRequest()
        for _ in range(n):
            m = request.messages.add(body=body)
            m.topic.name = topic
            m.system_properties.message_id = f"{self._prefix}{next(self._ids):016X}"
            m.system_properties.message_type = pb.NORMAL
        return request

    async def send(self, topic: str, body: bytes, n: int) -> None:
        response = await self.stub.SendMessage(self.send_request(topic, body, n), metadata=self.metadata)
        if response.status.code != pb.OK:
            raise RuntimeError(f"SendMessage: {response.status.code} {response.status.message}")

    async def receive_and_ack(self, group: str, topic: str, batch: int, poll_s: float = 5.0) -> int:
        """One ReceiveMessage of up to `batch`, then one AckMessage of all it got; how many."""
        request = pb.ReceiveMessageRequest(batch_size=batch, auto_renew=False)
        request.group.name = group
        request.message_queue.topic.name = topic
        request.message_queue.id = -1
        request.filter_expression.type = pb.TAG
        request.filter_expression.expression = "*"
        request.invisible_duration.FromSeconds(60)
        request.long_polling_timeout.FromMilliseconds(int(poll_s * 1000))
        ack = pb.AckMessageRequest()
        ack.group.name = group
        ack.topic.name = topic
        async for response in self.stub.ReceiveMessage(request, metadata=self.metadata, timeout=poll_s + 5):
            if response.HasField("message"):
                sp = response.message.system_properties
                ack.entries.add(message_id=sp.message_id, receipt_handle=sp.receipt_handle)
            elif response.HasField("status") and response.status.code not in (pb.OK, pb.MESSAGE_NOT_FOUND):
                raise RuntimeError(f"ReceiveMessage: {response.status.code} {response.status.message}")
        if not ack.entries:
            return 0
        answer = await self.stub.AckMessage(ack, metadata=self.metadata)
        if answer.status.code != pb.OK:
            raise RuntimeError(f"AckMessage: {answer.status.code} {answer.status.message}")
        return len(ack.entries)


async def drain(
    load: GrpcLoad, group: str, topic: str, total: int, batch: int, inflight: int, progress
) -> tuple[int, float]:
    """Receive and ack until `total` messages came or a receive finds none: how many came, and the
    seconds until the last of them was acked (not counting the empty long polls that end it)."""
    got = 0
    started = last = time.perf_counter()

    async def worker() -> None:
        nonlocal got, last
        while got < total:
            n = await load.receive_and_ack(group, topic, batch, poll_s=5.0)
            if n == 0:
                return
            got += n
            last = time.perf_counter()
            progress("grpc receive+ack", got, total)

    await asyncio.gather(*(worker() for _ in range(inflight)))
    return got, last - started
