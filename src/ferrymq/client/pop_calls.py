"""The remoting calls of pop consumption, as a client makes them: POP_MESSAGE to a broker, and
ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME to the master the receipt handle names (the handle is
self-describing, so any client or proxy can settle a message another one received).

Shared by the SDK's SimpleConsumer and the remote message service that gateways stand on.
"""

from __future__ import annotations

import time

from ferrymq.client.instance import ClientError, ClientInstance
from ferrymq.client.message import MessageQueue
from ferrymq.client.pull import master_addr
from ferrymq.net import RemotingError
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.pop import ReceiptHandle, real_topic
from ferrymq.protocol.remoting import RemotingCommand


class InvalidHandle(ClientError):
    """The text given as a receipt handle is not one."""


def parse_handle(text: str) -> ReceiptHandle:
    try:
        return ReceiptHandle.decode(text)
    except ProtocolError as e:
        raise InvalidHandle(f"not a receipt handle: {e}") from None


async def pop(
    instance: ClientInstance, addr: str, group: str, topic: str, *, queue_id: int = -1,
    max_messages: int, invisible_ms: int, poll_ms: int, expression_type: str, expression: str,
    init_mode: int, order: bool = False,
) -> RemotingCommand:  # fmt: skip
    """POP_MESSAGE (queue_id -1: any queue of the topic on that broker); the answer as it came."""
    ext = {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "maxMsgNums": str(max_messages),
        "invisibleTime": str(invisible_ms), "pollTime": str(poll_ms),
        "bornTime": str(int(time.time() * 1000)), "initMode": str(init_mode), "expType": expression_type,
        "exp": expression,
    }  # fmt: skip
    if order:
        ext["order"] = "true"
    request = RemotingCommand(RequestCode.POP_MESSAGE, ext_fields=ext)
    try:
        return await instance.invoke(addr, request, instance.request_timeout + poll_ms / 1000)
    except RemotingError as e:
        raise ClientError(f"pop from {addr} failed: {e}") from e


async def ack(
    instance: ClientInstance, group: str, topic: str, handle: str, *, fallback_addr: str | None = None
) -> RemotingCommand:
    """ACK_MESSAGE for a message of `topic` (as delivered: a retried one under its original topic)."""
    parsed = parse_handle(handle)
    ext = _settle_fields(group, topic, handle, parsed)
    return await _to_handle_master(instance, topic, parsed, RequestCode.ACK_MESSAGE, ext, fallback_addr)


async def change_invisible(
    instance: ClientInstance, group: str, topic: str, handle: str, invisible_ms: int,
    *, fallback_addr: str | None = None,
) -> tuple[RemotingCommand, str | None]:  # fmt: skip
    """CHANGE_MESSAGE_INVISIBLETIME: the answer, and the message's new handle when it succeeded."""
    parsed = parse_handle(handle)
    ext = {**_settle_fields(group, topic, handle, parsed), "invisibleTime": str(invisible_ms)}
    code = RequestCode.CHANGE_MESSAGE_INVISIBLETIME
    response = await _to_handle_master(instance, topic, parsed, code, ext, fallback_addr)
    if response.code != 0:
        return response, None
    h = response.ext_fields
    renewed = parsed._replace(
        start_offset=parsed.offset, pop_time=int(h["popTime"]), invisible_time=int(h["invisibleTime"]),
        revive_qid=int(h["reviveQid"]),
    )  # fmt: skip
    return response, renewed.encode()


def _settle_fields(group: str, topic: str, handle: str, parsed: ReceiptHandle) -> dict[str, str]:
    """Acks name the topic the handle's offset is in (a retry topic as such), as RocketMQ's clients do."""
    return {
        "consumerGroup": group, "topic": real_topic(parsed.kind, topic, group),
        "queueId": str(parsed.queue_id), "extraInfo": handle, "offset": str(parsed.offset),
    }  # fmt: skip


async def _to_handle_master(
    instance: ClientInstance, topic: str, handle: ReceiptHandle, code: int, ext: dict[str, str],
    fallback_addr: str | None,
) -> RemotingCommand:  # fmt: skip
    """To the master of the broker the handle names (it may have moved since the message came)."""
    mq = MessageQueue(topic=topic, broker_name=handle.broker_name, queue_id=handle.queue_id)
    try:
        addr = await master_addr(instance, mq)
    except ClientError:
        if fallback_addr is None:
            raise
        addr = fallback_addr
    try:
        return await instance.invoke(addr, RemotingCommand(code, ext_fields=ext))
    except RemotingError as e:
        raise ClientError(f"request to {addr} failed: {e}") from e
