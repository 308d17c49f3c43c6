"""Admin control of consumer groups: who is in a group, pause/resume and a consume rate limit
(kept in the group's config on every master and enforced by the brokers), and offset resets to a
timestamp while the group runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec

from ferrymq.client.instance import ClientError, ClientInstance
from ferrymq.client.message import MessageQueue
from ferrymq.protocol.bodies import (
    PAUSED,
    PAUSED_CLIENTS,
    RATE_LIMIT,
    GetConsumerListByGroupResponseBody,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    decode_body,
    decode_reset_offset_body,
    encode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import ResetOffsetRequestHeader
from ferrymq.protocol.remoting import RemotingCommand


@dataclass(frozen=True)
class ConsumptionControls:
    """A group's controls on one broker."""

    paused: bool
    paused_clients: frozenset[str]
    rate_limit: float | None  # messages per second for the whole group; None: unlimited


class ConsumerControl:
    """Mixed into Admin (which provides `instance` and `_masters`)."""

    instance: ClientInstance
    _masters: Callable[[str | None], Awaitable[dict[str, str]]]

    async def consumers(self, group: str) -> list[str]:
        """The client ids of the group's online members (as any master knows them)."""
        ids: set[str] = set()
        for addr in (await self._masters(None)).values():
            request = RemotingCommand(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext_fields={"consumerGroup": group}
            )
            response = await self.instance.invoke(addr, request)
            if response.code == ResponseCode.SUCCESS:
                ids.update(decode_body(GetConsumerListByGroupResponseBody, response.body).consumer_id_list)
        return sorted(ids)

    async def pause(
        self, group: str, client_ids: list[str] | None = None, *, cluster: str | None = None
    ) -> None:
        """Stop the brokers giving `group` messages: to every client, or only to `client_ids`."""

        def change(attributes: dict[str, str]) -> None:
            if client_ids:
                attributes[PAUSED_CLIENTS] = ",".join(sorted(_clients(attributes) | set(client_ids)))
            else:
                attributes[PAUSED] = "true"

        await self._change_group(group, change, cluster)

    async def resume(
        self, group: str, client_ids: list[str] | None = None, *, cluster: str | None = None
    ) -> None:
        """Undo `pause`: for the whole group (every client again), or for `client_ids` only."""

        def change(attributes: dict[str, str]) -> None:
            rest = _clients(attributes) - set(client_ids) if client_ids else set()
            if not client_ids:
                attributes.pop(PAUSED, None)
            attributes[PAUSED_CLIENTS] = ",".join(sorted(rest))

        await self._change_group(group, change, cluster)

    async def set_rate_limit(
        self, group: str, per_second: float | None, *, cluster: str | None = None
    ) -> None:
        """Give `group` at most `per_second` messages a second on each broker (None or 0: no limit)."""
        if per_second is not None and per_second < 0:
            raise ValueError("a rate limit must be positive (or None for none)")

        def change(attributes: dict[str, str]) -> None:
            attributes[RATE_LIMIT] = f"{per_second:g}" if per_second else ""

        await self._change_group(group, change, cluster)

    async def consumption_controls(
        self, group: str, *, cluster: str | None = None
    ) -> dict[str, ConsumptionControls]:
        """Per broker name: the group's pause state and rate limit."""
        controls = {}
        for name, addr in (await self._masters(cluster)).items():
            attributes = (await self._group_config(addr, group)).attributes
            limit = float(attributes[RATE_LIMIT]) if attributes.get(RATE_LIMIT) else None
            controls[name] = ConsumptionControls(
                attributes.get(PAUSED) == "true", frozenset(_clients(attributes)), limit
            )
        return controls

    async def _change_group(
        self, group: str, change: Callable[[dict[str, str]], None], cluster: str | None
    ) -> None:
        masters = await self._masters(cluster)
        if not masters:
            raise ClientError("no master broker to change the group on")
        for name, addr in masters.items():
            config = await self._group_config(addr, group)
            attributes = dict(config.attributes)
            change(attributes)
            updated = msgspec.structs.replace(config, attributes={k: v for k, v in attributes.items() if v})
            request = RemotingCommand(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=encode_body(updated)
            )
            response = await self.instance.invoke(addr, request)
            if response.code != ResponseCode.SUCCESS:
                raise ClientError(f"broker {name} refused to change group {group}: {response.remark}")

    async def _group_config(self, addr: str, group: str) -> SubscriptionGroupConfig:
        response = await self.instance.invoke(
            addr, RemotingCommand(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        )
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"broker {addr} did not list its groups: {response.remark}")
        table = decode_body(SubscriptionGroupWrapper, response.body).subscription_group_table
        return table.get(group) or SubscriptionGroupConfig(group)

    async def reset_offset(
        self, group: str, topic: str, timestamp: int, *, force: bool = True
    ) -> dict[MessageQueue, int]:
        """Move `group` on `topic` to the first message stored at or after `timestamp` (ms since the
        epoch; -1: the end), on every broker of the topic, while its consumers run: the brokers store
        the new offsets and tell the group's clients, which go on from there at once. Without
        `force`, queues the group has not reached yet keep their offsets. Returns the new offsets."""
        route = await self.instance.existing_route(topic)
        if route is None:
            raise ClientError(f"topic {topic} does not exist")
        header = ResetOffsetRequestHeader(group=group, topic=topic, timestamp=timestamp, is_force=force)
        offsets: dict[MessageQueue, int] = {}
        for name, addr in sorted(route.masters.items()):
            request = RemotingCommand(
                RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext_fields=header.to_ext_fields()
            )
            response = await self.instance.invoke(addr, request)
            if response.code != ResponseCode.SUCCESS:
                raise ClientError(f"broker {name} refused to reset {group} on {topic}: {response.remark}")
            offsets.update(decode_reset_offset_body(response.body))
        return offsets


def _clients(attributes: dict[str, str]) -> set[str]:
    return {c for c in attributes.get(PAUSED_CLIENTS, "").split(",") if c}
