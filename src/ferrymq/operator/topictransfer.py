"""Running plan_topictransfer's actions against the clusters, over RocketMQ's admin requests.

The consumer groups moved with the topic are those that committed offsets for it on the source's
masters (GET_ALL_CONSUMER_OFFSET); they are found once, before the first step, and kept in the
status so that the undo knows them too. A topic is deleted from the source's brokers only; their next
registration takes it out of the NameServers' routes, while the target's queues stay in them.
"""

from __future__ import annotations

from ferrymq.client.admin import Admin
from ferrymq.net import RemotingClient
from ferrymq.operator.plan_topictransfer import Action
from ferrymq.protocol.bodies import (
    ConsumerOffsetSerializeWrapper,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
    decode_body,
    encode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand


class ActionFailed(RuntimeError):
    """An admin call failed; the transfer rolls back."""


class NotYet(Exception):
    """wait_consumed: messages are still unread; the step runs again on the next reconcile."""


async def masters(admin: Admin, cluster: str) -> list[str]:
    info = await admin.cluster_info()
    names = info.cluster_addr_table.get(cluster) or []
    found = [
        info.broker_addr_table[n].broker_addrs[0]
        for n in names
        if 0 in info.broker_addr_table[n].broker_addrs
    ]
    if not found:
        raise ActionFailed(f"cluster {cluster} has no master broker")
    return found


async def _call(client: RemotingClient, addr: str, code: int, ext: dict[str, str] | None = None,
                body: bytes = b"") -> RemotingCommand:  # fmt: skip
    try:
        response = await client.invoke(addr, RemotingCommand(code, ext_fields=ext or {}, body=body))
    except Exception as e:
        raise ActionFailed(f"{addr}: {e}") from None
    if response.code != ResponseCode.SUCCESS:
        raise ActionFailed(f"{addr} refused request {code}: {response.remark}")
    return response


async def groups_of(namesrv: str, cluster: str, topic: str) -> list[str]:
    """The consumer groups that committed offsets for `topic` on `cluster`'s masters."""
    async with Admin(namesrv) as admin:
        found: set[str] = set()
        for addr in await masters(admin, cluster):
            response = await _call(admin.instance.remoting, addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
            for key in decode_body(ConsumerOffsetSerializeWrapper, response.body).offset_table:
                key_topic, _, group = key.partition("@")
                if key_topic == topic and group:
                    found.add(group)
        return sorted(found)


async def execute(namesrv: str, source_cluster: str, action: Action) -> None:
    """Run one admin action; raise NotYet while wait_consumed waits, ActionFailed when it fails."""
    async with Admin(namesrv) as admin:
        remoting = admin.instance.remoting
        source = await masters(admin, source_cluster)
        if action.op == "create_group":
            table = decode_body(
                SubscriptionGroupWrapper,
                (await _call(remoting, source[0], RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body,
            ).subscription_group_table
            config = table.get(action.group) or SubscriptionGroupConfig(group_name=action.group)
            for addr in await masters(admin, action.cluster):
                await _call(
                    remoting, addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=encode_body(config)
                )
        elif action.op in ("create_topic", "set_topic_perm"):
            topics = decode_body(
                TopicConfigSerializeWrapper,
                (await _call(remoting, source[0], RequestCode.GET_ALL_TOPIC_CONFIG)).body,
            ).topic_config_table
            existing = topics.get(action.topic)
            queues = (
                existing.write_queue_nums if existing else (1 if action.topic.startswith("%RETRY%") else 8)
            )
            try:
                await admin.create_topic(action.topic, queues, cluster=action.cluster, perm=action.perm)
            except Exception as e:
                raise ActionFailed(str(e)) from None
        elif action.op == "wait_consumed":
            try:
                progress = await admin.consumer_progress(action.group, action.topic)
            except Exception as e:
                raise ActionFailed(str(e)) from None
            names = await _names(admin, action.cluster)
            left = sum(p.lag for p in progress if p.consumer_offset >= 0 and p.queue.broker_name in names)
            if left:
                raise NotYet(
                    f"group {action.group} has {left} messages of {action.topic} to read on {action.cluster}"
                )
        elif action.op == "delete_topic":
            for addr in await masters(admin, action.cluster):
                await _call(remoting, addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": action.topic})
        elif action.op == "delete_group":
            for addr in await masters(admin, action.cluster):
                await _call(remoting, addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": action.group})
        else:
            raise ActionFailed(f"unknown action {action.op}")


async def _names(admin: Admin, cluster: str) -> set[str]:
    return set((await admin.cluster_info()).cluster_addr_table.get(cluster) or [])
