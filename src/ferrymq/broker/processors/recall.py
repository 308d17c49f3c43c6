"""RECALL_MESSAGE: the remoting face of the recall service."""

from __future__ import annotations

from ferrymq.broker.processors.common import error, ok
from ferrymq.broker.schedule.recall import RecallError, RecallService
from ferrymq.net.connection import Connection
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.headers import RecallMessageRequestHeader, RecallMessageResponseHeader
from ferrymq.protocol.remoting import RemotingCommand


class RecallProcessor:
    def __init__(self, recalls: RecallService) -> None:
        self.recalls = recalls

    def register(self, server) -> None:
        server.register(RequestCode.RECALL_MESSAGE, self.recall)

    async def recall(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = RecallMessageRequestHeader.from_ext_fields(request.ext_fields)
        try:
            message_id = await self.recalls.recall(h.topic, h.recall_handle, h.producer_group or "")
        except RecallError as e:
            return error(request, e.code, str(e))
        return ok(request, RecallMessageResponseHeader(message_id))
