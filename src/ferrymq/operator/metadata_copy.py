"""Scaling a Broker out: the new groups get the topics and subscription groups of `scalePodName`.

apache/rocketmq-operator copies topics.json and subscriptionGroup.json from that pod into the new
pods' store before they start. Here the same reaches a new group's brokers once they are up, over
RocketMQ's admin requests: GET_ALL_TOPIC_CONFIG and GET_ALL_SUBSCRIPTIONGROUP_CONFIG from the
source, UPDATE_AND_CREATE_TOPIC and UPDATE_AND_CREATE_SUBSCRIPTIONGROUP on the target. A topic the
target already has (its own system topics) or that names a broker or the cluster is not copied.
"""

from __future__ import annotations

from ferrymq.net import RemotingClient
from ferrymq.operator.pods import Obj
from ferrymq.protocol.bodies import (
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    decode_body,
    encode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand


class CopyError(RuntimeError):
    """A broker refused or did not answer; the copy is tried again on the next reconcile."""


def groups_to_seed(spec: Obj, status: Obj) -> list[int]:
    """The broker groups added since the Broker last reached its size, not yet given the metadata.

    Nothing on first creation (status.size 0: there is nothing to copy) or without scalePodName."""
    before = int(status.get("size") or 0)
    if before == 0 or not spec.get("scalePodName"):
        return []
    seeded = set(status.get("seededGroups") or [])
    return [g for g in range(before, int(spec["size"])) if g not in seeded]


def topics_to_copy(
    source: dict[str, TopicConfig], target: dict[str, TopicConfig], reserved: set[str]
) -> list:
    return [c for name, c in sorted(source.items()) if name not in target and name not in reserved]


async def _call(client: RemotingClient, addr: str, code: int, ext: dict[str, str] | None = None,
                body: bytes = b"") -> RemotingCommand:  # fmt: skip
    try:
        response = await client.invoke(addr, RemotingCommand(code, ext_fields=ext or {}, body=body))
    except Exception as e:
        raise CopyError(f"{addr}: {e}") from None
    if response.code != ResponseCode.SUCCESS:
        raise CopyError(f"{addr} refused request {code}: {response.remark}")
    return response


async def copy_metadata(source: str, target: str, reserved: set[str]) -> tuple[int, int]:
    """Copy what the broker at `target` lacks from the one at `source`: (topics, groups) copied."""
    client = RemotingClient()
    try:
        read = decode_body(
            TopicConfigSerializeWrapper, (await _call(client, source, RequestCode.GET_ALL_TOPIC_CONFIG)).body
        ).topic_config_table
        have = decode_body(
            TopicConfigSerializeWrapper, (await _call(client, target, RequestCode.GET_ALL_TOPIC_CONFIG)).body
        ).topic_config_table
        topics = topics_to_copy(read, have, reserved)
        for config in topics:
            ext = {
                "topic": config.topic_name,
                "defaultTopic": "TBW102",
                "readQueueNums": str(config.read_queue_nums),
                "writeQueueNums": str(config.write_queue_nums),
                "perm": str(config.perm),
                "topicFilterType": config.topic_filter_type,
                "topicSysFlag": str(config.topic_sys_flag),
                "order": str(config.order).lower(),
            }
            await _call(client, target, RequestCode.UPDATE_AND_CREATE_TOPIC, ext)
        groups = decode_body(
            SubscriptionGroupWrapper,
            (await _call(client, source, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body,
        ).subscription_group_table
        for group in groups.values():
            await _call(
                client, target, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=encode_body(group)
            )
        return len(topics), len(groups)
    finally:
        await client.close()
