"""PULL_MESSAGE and LITE_PULL_MESSAGE: the remoting face of the read service."""

from __future__ import annotations

from ferrymq.broker.services.read import ReadService
from ferrymq.net.connection import Connection
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from ferrymq.protocol.remoting import RemotingCommand

FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 0x1, 0x2, 0x4
_SUCCESS = ResponseCode.SUCCESS


class PullProcessor:
    def __init__(self, reads: ReadService) -> None:
        self.reads = reads

    def register(self, server) -> None:
        server.register(RequestCode.PULL_MESSAGE, self.pull, eager=True)
        server.register(RequestCode.LITE_PULL_MESSAGE, self.pull, eager=True)

    async def pull(self, conn: Connection | None, request: RemotingCommand) -> RemotingCommand:
        h = PullMessageRequestHeader.from_ext_fields(request.ext_fields)
        flags = h.sys_flag
        # without the subscription flag the group's registered subscription applies (None)
        expression = (h.subscription or "") if flags & FLAG_SUBSCRIPTION else None
        outcome = await self.reads.read(
            h.consumer_group, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, h.max_msg_bytes or 0,
            expression, h.expression_type, h.commit_offset if flags & FLAG_COMMIT_OFFSET else -1,
            bool(flags & FLAG_SUSPEND), h.suspend_timeout_millis, conn,
        )  # fmt: skip
        code = outcome.code
        if outcome.next_begin_offset < 0:  # refused: no offsets to tell
            return request.make_response(code, outcome.remark)
        header = PullMessageResponseHeader(
            suggest_which_broker_id=outcome.suggest_broker_id,
            next_begin_offset=outcome.next_begin_offset,
            min_offset=outcome.min_offset,
            max_offset=outcome.max_offset,
        )
        body = outcome.body() if code == _SUCCESS else b""
        return request.make_response(code, outcome.remark, header.to_ext_fields(), body)
