"""Scaling a Broker in: a group leaves only once producers have left it and consumers have read it.

Draining is RocketMQ's way of taking a broker offline: its write permission is wiped on every
NameServer (WIPE_WRITE_PERM_OF_BROKER, so routes stop offering its queues to producers), then the
operator waits until every committed consumer offset on the group's brokers has reached its
queue's end (GET_ALL_CONSUMER_OFFSET against GET_MAX_OFFSET). Only then are its StatefulSets deleted.
"""

from __future__ import annotations

from ferrymq.net import RemotingClient
from ferrymq.protocol.bodies import ConsumerOffsetSerializeWrapper, decode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand


class DrainError(RuntimeError):
    """A NameServer or broker did not answer; the drain is tried again on the next reconcile."""


async def _call(client: RemotingClient, addr: str, code: int, ext: dict[str, str]) -> RemotingCommand:
    try:
        response = await client.invoke(addr, RemotingCommand(code, ext_fields=ext))
    except Exception as e:
        raise DrainError(f"{addr}: {e}") from None
    if response.code != ResponseCode.SUCCESS:
        raise DrainError(f"{addr} refused request {code}: {response.remark}")
    return response


async def wipe_write_perm(namesrvs: list[str], broker_name: str) -> None:
    """Stop every NameServer offering `broker_name`'s queues for writing (idempotent)."""
    client = RemotingClient()
    try:
        for addr in namesrvs:
            await _call(client, addr, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": broker_name})
    finally:
        await client.close()


async def unread(broker: str) -> int:
    """Messages on the broker at `broker` that some consumer group committed offsets for but has not read."""
    client = RemotingClient()
    try:
        response = await _call(client, broker, RequestCode.GET_ALL_CONSUMER_OFFSET, {})
        table = decode_body(ConsumerOffsetSerializeWrapper, response.body).offset_table
        total = 0
        for key, queues in table.items():
            topic = key.split("@", 1)[0]
            for queue_id, committed in queues.items():
                ext = {"topic": topic, "queueId": str(queue_id)}
                end = int((await _call(client, broker, RequestCode.GET_MAX_OFFSET, ext)).ext_fields["offset"])
                total += max(end - committed, 0)
        return total
    finally:
        await client.close()
