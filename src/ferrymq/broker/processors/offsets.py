"""Consumer offsets and queue bounds: QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET, by time."""

from __future__ import annotations

from ferrymq.broker.offsets import ConsumerOffsetManager
from ferrymq.broker.processors.common import error, ok
from ferrymq.broker.services.read import ReadService
from ferrymq.net.connection import Connection
from ferrymq.protocol.bodies import encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import (
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    TopicQueueRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.store import MessageStore


class OffsetProcessor:
    def __init__(self, reads: ReadService, offsets: ConsumerOffsetManager, store: MessageStore) -> None:
        self.reads = reads
        self.offsets = offsets
        self.store = store

    def register(self, server) -> None:
        server.register(RequestCode.QUERY_CONSUMER_OFFSET, self.query_consumer_offset)
        server.register(RequestCode.UPDATE_CONSUMER_OFFSET, self.update_consumer_offset)
        server.register(RequestCode.GET_MAX_OFFSET, self.get_max_offset)
        server.register(RequestCode.GET_MIN_OFFSET, self.get_min_offset)
        server.register(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, self.search_offset)
        server.register(RequestCode.GET_EARLIEST_MSG_STORETIME, self.earliest_store_time)
        server.register(RequestCode.GET_ALL_CONSUMER_OFFSET, self.all_consumer_offsets)

    async def query_consumer_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        zero_if_new = h.set_zero_if_not_found is not False
        offset = self.reads.committed_offset(h.consumer_group, h.topic, h.queue_id, zero_if_new)
        if offset is None:
            return error(
                request, ResponseCode.QUERY_NOT_FOUND, f"no offset stored for group {h.consumer_group}"
            )
        return ok(request, OffsetResponseHeader(offset))

    async def update_consumer_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        self.reads.commit_offset(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return ok(request)

    async def get_max_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.from_ext_fields(request.ext_fields)
        return ok(request, OffsetResponseHeader(self.store.get_max_offset(h.topic, h.queue_id)))

    async def get_min_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = TopicQueueRequestHeader.from_ext_fields(request.ext_fields)
        return ok(request, OffsetResponseHeader(self.store.get_min_offset(h.topic, h.queue_id)))

    async def search_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_ext_fields(request.ext_fields)
        boundary = (h.boundary_type or "lower").lower()
        if boundary not in ("lower", "upper"):
            return error(
                request,
                ResponseCode.INVALID_PARAMETER,
                f"boundaryType must be lower or upper, not {boundary}",
            )
        offset = self.store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp, boundary)
        return ok(request, OffsetResponseHeader(offset))

    async def earliest_store_time(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = TopicQueueRequestHeader.from_ext_fields(request.ext_fields)
        timestamp = self.store.get_earliest_message_time(h.topic, h.queue_id)
        if timestamp < 0:
            return error(request, ResponseCode.SYSTEM_ERROR, f"no message in {h.topic} queue {h.queue_id}")
        return ok(request, GetEarliestMsgStoretimeResponseHeader(timestamp))

    async def all_consumer_offsets(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Every committed offset (slaves copy them from their master)."""
        return ok(request, body=encode_body(self.offsets.wrapper()))
