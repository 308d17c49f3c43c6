"""Pop tests against a real in-process NameServer and Broker, over remoting as a proxy would call."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.protocol.codes import RequestCode as Req
from ferrymq.protocol.codes import ResponseCode as Res
from ferrymq.protocol.message_ext import decode_records
from ferrymq.protocol.pop import POP_CK
from ferrymq.protocol.properties import encode_properties
from tests.broker.conftest import Cluster, make_cluster

__all__ = ["make_cluster"]


@pytest.fixture
async def cluster(make_cluster) -> Cluster:
    return await make_cluster()


async def create_topic(cluster: Cluster, topic: str, queues: int = 1) -> None:
    ext = {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "order": "false",
    }
    assert (await cluster.call(Req.UPDATE_AND_CREATE_TOPIC, ext)).code == Res.SUCCESS


async def create_group(cluster: Cluster, group: str, **settings) -> None:
    from ferrymq.protocol.bodies import SubscriptionGroupConfig, encode_body

    body = encode_body(SubscriptionGroupConfig(group, **settings))
    assert (await cluster.call(Req.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)).code == Res.SUCCESS


async def send(cluster: Cluster, topic: str, body: bytes, queue_id: int = 0, **props) -> None:
    ext = {
        "producerGroup": "PG",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": queue_id,
        "sysFlag": 0,
        "bornTimestamp": int(time.time() * 1000),
        "flag": 0,
        "properties": encode_properties(props),
    }
    response = await cluster.call(Req.SEND_MESSAGE, ext, body)
    assert response.code == Res.SUCCESS, response.remark


async def pop(
    cluster: Cluster,
    group: str,
    topic: str,
    n: int = 32,
    invisible_ms: int = 60_000,
    queue_id: int = -1,
    poll_ms: int = 0,
    **extra,
):
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": queue_id,
        "maxMsgNums": n,
        "invisibleTime": invisible_ms,
        "pollTime": poll_ms,
        "bornTime": int(time.time() * 1000),
        "initMode": 0,
        **extra,
    }
    response = await cluster.call(Req.POP_MESSAGE, ext, timeout=poll_ms / 1000 + 5)
    messages = decode_records(response.body) if response.code == Res.SUCCESS else []
    return response, messages


def handle(message) -> str:
    return message.properties[POP_CK]


async def ack(cluster: Cluster, group: str, topic: str, message=None, extra_info: str | None = None):
    info = extra_info or handle(message)
    parts = info.split(" ")
    ext = {"consumerGroup": group, "topic": topic, "queueId": parts[6], "extraInfo": info, "offset": parts[7]}
    return await cluster.call(Req.ACK_MESSAGE, ext)


async def change_invisible(cluster: Cluster, group: str, topic: str, info: str, invisible_ms: int):
    parts = info.split(" ")
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": parts[6],
        "extraInfo": info,
        "offset": parts[7],
        "invisibleTime": invisible_ms,
    }
    return await cluster.call(Req.CHANGE_MESSAGE_INVISIBLETIME, ext)


async def eventually(condition, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
