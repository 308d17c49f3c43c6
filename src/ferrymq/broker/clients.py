"""Who is connected: producer and consumer groups, filled by HEART_BEAT, emptied by expiry.

The broker talks back to clients over their own connections (NOTIFY_CONSUMER_IDS_CHANGED,
CHECK_TRANSACTION_STATE, GET_CONSUMER_RUNNING_INFO), so each member keeps the channel it heartbeats
on: a remoting Connection, or a proxy's channel to a gRPC client in this process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from ferrymq.protocol.bodies import ConsumerData, SubscriptionData
from ferrymq.protocol.codes import LanguageCode
from ferrymq.protocol.remoting import RemotingCommand


class Channel(Protocol):
    """What the broker needs of a client's connection to call it back (net.Connection has it)."""

    remote_address: str

    async def send_oneway(self, command: RemotingCommand) -> None: ...

    async def request(self, command: RemotingCommand, timeout: float) -> RemotingCommand: ...


@dataclass
class Member:
    client_id: str
    connection: Channel
    last_heartbeat: float = field(default_factory=time.monotonic)
    language: LanguageCode = LanguageCode.JAVA  # some answers differ for C++ clients (offset resets)


@dataclass
class ConsumerGroup:
    name: str
    consume_type: str | int | None = None  # names once decoded; ordinals as a client may send them
    message_model: str | int | None = None
    consume_from_where: str | int | None = None
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    members: dict[str, Member] = field(default_factory=dict)  # client id -> member


class ClientRegistry:
    """Producer and consumer group membership of one broker."""

    def __init__(self) -> None:
        self.consumers: dict[str, ConsumerGroup] = {}
        self.producers: dict[str, dict[str, Member]] = {}

    def heartbeat_consumer(
        self, client_id: str, conn: Channel, data: ConsumerData, language: LanguageCode = LanguageCode.JAVA
    ) -> bool:
        """Record a consumer's heartbeat; True when the group's membership changed."""
        group = self.consumers.get(data.group_name)
        if group is None:
            group = self.consumers[data.group_name] = ConsumerGroup(data.group_name)
        group.consume_type = data.consume_type
        group.message_model = data.message_model
        group.consume_from_where = data.consume_from_where
        group.subscriptions = {s.topic: s for s in data.subscription_data_set}
        member = group.members.get(client_id)
        if member is not None and member.connection is conn:
            member.last_heartbeat = time.monotonic()
            return False
        group.members[client_id] = Member(client_id, conn, language=language)
        return member is None

    def heartbeat_producer(
        self, client_id: str, conn: Channel, group: str, language: LanguageCode = LanguageCode.JAVA
    ) -> None:
        self.producers.setdefault(group, {})[client_id] = Member(client_id, conn, language=language)

    def unregister(self, client_id: str, producer_group: str | None, consumer_group: str | None) -> bool:
        """Forget a client; True when a consumer group's membership changed."""
        if producer_group:
            self.producers.get(producer_group, {}).pop(client_id, None)
        if consumer_group:
            group = self.consumers.get(consumer_group)
            if group is not None and group.members.pop(client_id, None) is not None:
                return True
        return False

    def drop_connection(self, conn: Channel) -> list[str]:
        """Forget every client on a closed connection; return the consumer groups that changed."""
        changed = []
        for group in self.consumers.values():
            gone = [cid for cid, m in group.members.items() if m.connection is conn]
            for cid in gone:
                del group.members[cid]
            if gone:
                changed.append(group.name)
        for members in self.producers.values():
            for cid in [cid for cid, m in members.items() if m.connection is conn]:
                del members[cid]
        return changed

    def expire(self, max_idle: float) -> list[str]:
        """Drop consumers silent for `max_idle` seconds; return the groups that changed."""
        deadline = time.monotonic() - max_idle
        changed = []
        for group in self.consumers.values():
            stale = [cid for cid, m in group.members.items() if m.last_heartbeat < deadline]
            for cid in stale:
                del group.members[cid]
            if stale:
                changed.append(group.name)
        for members in self.producers.values():
            for cid in [cid for cid, m in members.items() if m.last_heartbeat < deadline]:
                del members[cid]
        return changed

    def consumer_ids(self, group: str) -> list[str]:
        g = self.consumers.get(group)
        return sorted(g.members) if g else []

    def subscription(self, group: str, topic: str) -> SubscriptionData | None:
        g = self.consumers.get(group)
        return g.subscriptions.get(topic) if g else None
