"""CONSUMER_SEND_MSG_BACK (a consumer failed a message: retry it later, or dead-letter it), where a
sent message is really stored (retry sends past their limit go to the DLQ; delayed and timed
messages are held back), and GET_ALL_DELAY_OFFSET."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from ferrymq.broker.processors.common import PUT_STATUS_CODES, error
from ferrymq.broker.schedule import SCHEDULE_TOPIC, TIMER_TOPIC, ScheduleError
from ferrymq.broker.topics import DLQ_GROUP_PREFIX, PERM_READ, PERM_WRITE, RETRY_GROUP_PREFIX
from ferrymq.net.connection import Connection
from ferrymq.protocol.bodies import encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader
from ferrymq.protocol.message_ext import decode_record
from ferrymq.protocol.properties import Prop, decode_properties, encode_properties
from ferrymq.protocol.record import pack_host
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.store import PutStatus

if TYPE_CHECKING:
    from ferrymq.broker.server import Broker

DLQ_NUMS_PER_GROUP = 1
HELD_BACK_TOPICS = (SCHEDULE_TOPIC, TIMER_TOPIC)  # only the broker itself writes these
_DLQ_PERM = PERM_READ | PERM_WRITE  # RocketMQ 5 makes DLQs readable, so dead letters can be re-sent


class SendBackProcessor:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def register(self, server) -> None:
        server.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.send_back)
        server.register(RequestCode.GET_ALL_DELAY_OFFSET, self.delay_offsets)
        server.register(RequestCode.GET_TIMER_CHECK_POINT, self.timer_checkpoint)

    async def send_back(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Store a failed message again: in %RETRY%<group> with a growing delay (level 3 + times
        consumed again), or in %DLQ%<group> once it reached the group's (or the header's) maximum
        or when the consumer asks so with a negative delay level."""
        h = ConsumerSendMsgBackRequestHeader.from_ext_fields(request.ext_fields)
        broker = self.broker
        group = broker.groups.get(h.group)
        if group is None:
            return error(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                         f"subscription group {h.group} does not exist")  # fmt: skip
        if not broker.config.broker_permission & PERM_WRITE:
            return error(request, ResponseCode.NO_PERMISSION,
                         f"broker {broker.config.broker_name} is not writable")  # fmt: skip
        if group.retry_queue_nums <= 0:  # the group wants no retries: the message is dropped
            return request.make_response(ResponseCode.SUCCESS)
        topic = RETRY_GROUP_PREFIX + h.group
        tc = self._ensure(topic, group.retry_queue_nums)
        if not tc.perm & PERM_WRITE:
            return error(request, ResponseCode.NO_PERMISSION, f"topic {topic} is not writable")
        record = broker.store.look_message_by_offset(h.offset)
        try:
            msg = decode_record(record) if record is not None else None
        except MessageDecodeError:
            msg = None
        if msg is None:
            return error(request, ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        props = msg.properties
        props.setdefault(Prop.RETRY_TOPIC, msg.topic)
        props[Prop.ORIGIN_MESSAGE_ID] = props.get(Prop.ORIGIN_MESSAGE_ID) or msg.offset_msg_id
        max_times = group.retry_max_times if h.max_reconsume_times is None else h.max_reconsume_times
        queue_id = random.randrange(group.retry_queue_nums)
        if msg.reconsume_times >= max_times or h.delay_level < 0:
            topic, queue_id = DLQ_GROUP_PREFIX + h.group, 0
            self._ensure(topic, DLQ_NUMS_PER_GROUP, _DLQ_PERM)
            props.pop(Prop.DELAY, None)
        else:
            props[Prop.DELAY] = str(h.delay_level or 3 + msg.reconsume_times)
        raw = encode_properties(props).encode()
        try:
            diverted = broker.scheduler.divert(raw, topic, queue_id, msg.sys_flag)
        except ScheduleError as e:
            return error(request, ResponseCode.MESSAGE_ILLEGAL, str(e))
        store_topic, store_queue, raw = diverted or (topic, queue_id, raw)
        result = broker.store.put_message(
            store_topic, store_queue, msg.body, raw, flag=msg.flag, sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp, born_host=pack_host(*msg.born_host),
            reconsume_times=msg.reconsume_times + 1,
        )  # fmt: skip
        if result.status is not PutStatus.PUT_OK:
            return error(request, PUT_STATUS_CODES.get(result.status, ResponseCode.SYSTEM_ERROR),
                         result.remark or result.status.name)  # fmt: skip
        broker.written()
        return request.make_response(ResponseCode.SUCCESS)

    async def delay_offsets(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        body = encode_body(self.broker.scheduler.delays.offset_table())
        return request.make_response(ResponseCode.SUCCESS, body=body)

    async def timer_checkpoint(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """The timer's progress, as JSON (ferrymq's wheel, not RocketMQ's TimerLog checkpoint)."""
        body = encode_body(self.broker.scheduler.timer.checkpoint())
        return request.make_response(ResponseCode.SUCCESS, body=body)

    def _ensure(self, topic: str, queue_nums: int, perm: int = PERM_READ | PERM_WRITE):
        if self.broker.topics.ensure(topic, queue_nums, perm):
            self.broker.schedule_registration()
        return self.broker.topics.get(topic)


def store_destination(
    broker: Broker, request: RemotingCommand, header: SendMessageRequestHeader, queue_id: int, props: bytes
) -> tuple[str, int, bytes] | RemotingCommand:
    """Where a sent message is stored: (topic, queue id, properties), or an error response.

    A send to %RETRY%<group> whose reconsumeTimes passed the maximum (the header's, else the
    group's) goes to %DLQ%<group> (RocketMQ's handleRetryAndDLQ); a message with DELAY or a
    delivery time is held back in a system topic until due.
    """
    topic = header.topic
    if topic in HELD_BACK_TOPICS:
        return error(request, ResponseCode.NO_PERMISSION, f"sending to system topic {topic} is forbidden")
    if topic.startswith(RETRY_GROUP_PREFIX):
        name = topic[len(RETRY_GROUP_PREFIX) :]
        group = broker.groups.get(name)
        if group is None:
            return error(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                         f"subscription group {name} does not exist")  # fmt: skip
        max_times = (
            group.retry_max_times if header.max_reconsume_times is None else header.max_reconsume_times
        )
        if (header.reconsume_times or 0) > max_times:
            topic, queue_id = DLQ_GROUP_PREFIX + name, 0
            if broker.topics.ensure(topic, DLQ_NUMS_PER_GROUP, _DLQ_PERM):
                broker.schedule_registration()
            values = decode_properties(props)
            values[Prop.DELAY] = "-1"  # as RocketMQ marks it: a dead letter is never held back
            return topic, queue_id, encode_properties(values).encode()
    try:
        diverted = broker.scheduler.divert(props, topic, queue_id, header.sys_flag)
    except ScheduleError as e:
        return error(request, ResponseCode.MESSAGE_ILLEGAL, str(e))
    return diverted or (topic, queue_id, props)
