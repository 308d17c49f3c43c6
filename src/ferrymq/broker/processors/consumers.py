"""Resetting a consumer group's offsets while it runs (INVOKE_BROKER_TO_RESET_OFFSET), and giving a
group another group's offsets (CLONE_GROUP_OFFSET).

The broker works out each queue's offset for the timestamp, stores it as the group's committed
offset, and tells every online member of the group (RESET_CONSUMER_CLIENT_OFFSET, oneway) to go on
from there at once — as RocketMQ's Broker2Client.resetOffset does.
"""

from __future__ import annotations

import logging

from ferrymq.broker.clients import ClientRegistry
from ferrymq.broker.offsets import ConsumerOffsetManager
from ferrymq.broker.processors.common import error, ok
from ferrymq.broker.topics import TopicConfigManager
from ferrymq.net.connection import Connection
from ferrymq.net.errors import RemotingError
from ferrymq.protocol.bodies import MessageQueue, encode_reset_offset_body, encode_reset_offset_body_for_c
from ferrymq.protocol.codes import LanguageCode, RequestCode, ResponseCode
from ferrymq.protocol.headers import CloneGroupOffsetRequestHeader, ResetOffsetRequestHeader
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.store import MessageStore

log = logging.getLogger(__name__)


class ConsumerAdminProcessor:
    def __init__(
        self, broker_name: str, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
        store: MessageStore, clients: ClientRegistry,
    ) -> None:  # fmt: skip
        self.broker_name = broker_name
        self.topics = topics
        self.offsets = offsets
        self.store = store
        self.clients = clients

    def register(self, server) -> None:
        server.register(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, self.reset_offset)
        server.register(RequestCode.CLONE_GROUP_OFFSET, self.clone_offsets)

    async def clone_offsets(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Copy the source group's offsets topic by topic; unless `offline`, skip topics an online
        source group does not subscribe to (RocketMQ's rule)."""
        h = CloneGroupOffsetRequestHeader.from_ext_fields(request.ext_fields)
        if h.topic and self.topics.get(h.topic) is None:
            return error(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        names = [h.topic] if h.topic else sorted(self.offsets.topics_of(h.src_group))
        online = None if h.offline else self.clients.consumers.get(h.src_group)
        cloned = [
            topic for topic in names
            if self.topics.get(topic) is not None
            and not (online and online.subscriptions and topic not in online.subscriptions)
            and self.offsets.clone(h.src_group, h.dest_group, topic)
        ]  # fmt: skip
        if not cloned:
            return error(
                request, ResponseCode.QUERY_NOT_FOUND,
                f"group {h.src_group} has no offsets to clone" + (f" on {h.topic}" if h.topic else ""),
            )  # fmt: skip
        self.offsets.persist()
        log.info("offsets of %s cloned to %s on %s", h.src_group, h.dest_group, ", ".join(cloned))
        return ok(request)

    async def reset_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ResetOffsetRequestHeader.from_ext_fields(request.ext_fields)
        tc = self.topics.get(h.topic)
        if tc is None:
            return error(request, ResponseCode.TOPIC_NOT_EXIST, f"topic {h.topic} does not exist")
        offsets = {}
        for queue_id in range(tc.read_queue_nums):
            if h.queue_id >= 0 and queue_id != h.queue_id:
                continue
            offset = self._offset_for(h, queue_id)
            self.offsets.commit(h.group, h.topic, queue_id, offset)
            offsets[MessageQueue(h.topic, self.broker_name, queue_id)] = offset
        self.offsets.persist()
        body = encode_reset_offset_body(offsets)
        body_for_c = encode_reset_offset_body_for_c(offsets)
        consumers = self.clients.consumers.get(h.group)
        members = list(consumers.members.values()) if consumers else []
        notice = ResetOffsetRequestHeader(
            group=h.group, topic=h.topic, timestamp=h.timestamp, is_force=h.is_force
        )
        for member in members:
            command = RemotingCommand(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET, ext_fields=notice.to_ext_fields(),
                body=body_for_c if member.language is LanguageCode.CPP else body,
            )  # fmt: skip
            try:
                await member.connection.send_oneway(command)
            except RemotingError as e:
                log.warning(
                    "could not tell %s of group %s to reset offsets: %s", member.client_id, h.group, e
                )
        log.info("group %s reset on %s to %s (%d clients told)", h.group, h.topic, h.timestamp, len(members))
        return ok(request, body=body)

    def _offset_for(self, h: ResetOffsetRequestHeader, queue_id: int) -> int:
        """The queue's offset for the timestamp (-1: its end, or `offset` if given); unless forced,
        a group that has not got that far yet keeps its offset."""
        store = self.store
        if h.offset is not None and h.offset >= 0:
            target = h.offset
        elif h.timestamp < 0:
            target = store.get_max_offset(h.topic, queue_id)
        else:
            target = store.get_offset_in_queue_by_time(h.topic, queue_id, h.timestamp)
        current = self.offsets.query(h.group, h.topic, queue_id)
        if h.is_force or current is None or target < current:
            return target
        return current
