"""CONSUMER_SEND_MSG_BACK (a consumer failed a message: the put service retries it later or
dead-letters it), and the scheduled-message progress: GET_ALL_DELAY_OFFSET, GET_TIMER_CHECK_POINT."""

from __future__ import annotations

from ferrymq.broker.schedule.scheduler import Scheduler
from ferrymq.broker.services.put import PutService
from ferrymq.net.connection import Connection
from ferrymq.protocol.bodies import encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import ConsumerSendMsgBackRequestHeader
from ferrymq.protocol.remoting import RemotingCommand


class SendBackProcessor:
    def __init__(self, puts: PutService, scheduler: Scheduler) -> None:
        self.puts = puts
        self.scheduler = scheduler

    def register(self, server) -> None:
        server.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.send_back)
        server.register(RequestCode.GET_ALL_DELAY_OFFSET, self.delay_offsets)
        server.register(RequestCode.GET_TIMER_CHECK_POINT, self.timer_checkpoint)

    async def send_back(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ConsumerSendMsgBackRequestHeader.from_ext_fields(request.ext_fields)
        outcome = await self.puts.send_back(h.group, h.offset, h.delay_level, h.max_reconsume_times)
        return request.make_response(outcome.code, outcome.remark)

    async def delay_offsets(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        body = encode_body(self.scheduler.delays.offset_table())
        return request.make_response(ResponseCode.SUCCESS, body=body)

    async def timer_checkpoint(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """The timer's progress, as JSON (ferrymq's wheel, not RocketMQ's TimerLog checkpoint)."""
        body = encode_body(self.scheduler.timer.checkpoint())
        return request.make_response(ResponseCode.SUCCESS, body=body)
