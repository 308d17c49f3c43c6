"""SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE: validate, auto-create, store, answer."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from ferrymq.broker.processors.common import PUT_STATUS_CODES, STORED_CODES, error
from ferrymq.broker.processors.send_back import store_destination
from ferrymq.broker.schedule.divert import ScheduleError
from ferrymq.broker.topics import PERM_WRITE, topic_problem
from ferrymq.broker.transactions import HALF_TOPIC
from ferrymq.net.connection import Connection
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import SendMessageRequestHeader
from ferrymq.protocol.message_id import offset_msg_id, offset_msg_ids
from ferrymq.protocol.properties import find_property
from ferrymq.protocol.record import pack_host
from ferrymq.protocol.remoting import RemotingCommand, ext_str
from ferrymq.protocol.sys_flag import TRANSACTION_TYPE_MASK
from ferrymq.store import PutStatus

if TYPE_CHECKING:
    from ferrymq.broker.server import Broker

_WAIT_FALSE = b"WAIT\x01false"
_TRAN_MSG = b"TRAN_MSG\x01true"
# Plain values of the names every send compares against (an enum attribute costs a look-up each time).
_PUT_OK = PutStatus.PUT_OK
_SUCCESS = int(ResponseCode.SUCCESS)
_BATCH = int(RequestCode.SEND_BATCH_MESSAGE)


class SendProcessor:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._born_hosts: dict[str, bytes] = {}

    def register(self, server) -> None:
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            server.register(code, self.send, eager=True)

    def _born_host(self, conn: Connection) -> bytes:
        """The producer's address as the record's BORNHOST (cached per peer address)."""
        packed = self._born_hosts.get(conn.remote_address)
        if packed is None:
            ip, _, port = conn.remote_address.rpartition(":")
            try:
                packed = pack_host(ip.strip("[]"), int(port))
            except ValueError:
                packed = self.broker.store.store_host
            if len(self._born_hosts) > 10_000:
                self._born_hosts.clear()
            self._born_hosts[conn.remote_address] = packed
        return packed

    async def send(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = SendMessageRequestHeader.from_ext_fields(request.ext_fields)
        broker = self.broker
        if not broker.is_master:
            return error(
                request,
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"broker {broker.config.broker_name} is a slave: it takes no writes",
            )
        if (fenced := broker.fenced()) is not None:
            return error(request, ResponseCode.SERVICE_NOT_AVAILABLE, fenced)
        if not broker.config.broker_permission & PERM_WRITE:
            return error(
                request, ResponseCode.NO_PERMISSION, f"broker {broker.config.broker_name} is not writable"
            )
        topic = header.topic
        tc = broker.topics.get(topic)
        if tc is None:
            problem = topic_problem(topic)
            if problem:
                return error(request, ResponseCode.MESSAGE_ILLEGAL, problem)
            if broker.config.auto_create_topic_enable:
                tc = broker.topics.create_from_template(
                    topic, header.default_topic, header.default_topic_queue_nums
                )
                if tc is not None:
                    broker.schedule_registration()
            if tc is None:
                return error(
                    request,
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic {topic} does not exist and auto-creation is off",
                )
        if not tc.perm & PERM_WRITE:
            return error(request, ResponseCode.NO_PERMISSION, f"topic {topic} is not writable")
        queue_id = header.queue_id
        if queue_id < 0:
            queue_id = random.randrange(tc.write_queue_nums)
        elif queue_id >= tc.write_queue_nums:
            return error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"queueId {queue_id} is illegal: topic {topic} has {tc.write_queue_nums} write queues",
            )
        props = (header.properties or "").encode()
        store = broker.store
        batch = request.code == _BATCH or header.batch
        sys_flag = header.sys_flag
        if _TRAN_MSG in props:  # a half message (RocketMQ goes by this property): hidden until committed
            try:  # a delay or delivery time is applied at commit; refuse a bad one now
                broker.scheduler.divert(props, topic, queue_id, sys_flag & ~TRANSACTION_TYPE_MASK)
            except ScheduleError as e:
                return error(request, ResponseCode.MESSAGE_ILLEGAL, str(e))
            props = store_props = broker.transactions.half(topic, queue_id, props)
            sys_flag, store_topic, store_queue = sys_flag & ~TRANSACTION_TYPE_MASK, HALF_TOPIC, 0
        elif not batch:  # retries past their limit go to the DLQ, delayed and timed messages wait
            destination = store_destination(broker, request, header, queue_id, props)
            if destination.__class__ is RemotingCommand:
                return destination
            store_topic, store_queue, store_props = destination
        born_host = self._born_host(conn)
        if batch:
            result = store.put_batch(
                topic, queue_id, request.body, sys_flag=header.sys_flag, born_timestamp=header.born_timestamp,
                born_host=born_host,
            )  # fmt: skip
        else:
            result = store.put_message(
                store_topic, store_queue, request.body, store_props, flag=header.flag, sys_flag=sys_flag,
                born_timestamp=header.born_timestamp, born_host=born_host,
                reconsume_times=header.reconsume_times,
            )  # fmt: skip
        status = result.status
        if status is _PUT_OK:
            broker.written()
        if status is _PUT_OK and _waits_for_store(props):
            if result.flush_future is not None:
                status = await result.durable()
            if status is _PUT_OK and broker.waits_for_replicas:
                timeout = broker.config.store.sync_flush_timeout / 1000
                status = await broker.ha.wait_replicated(result.wrote_offset + result.wrote_bytes, timeout)
        code = _SUCCESS if status is _PUT_OK else PUT_STATUS_CODES[status]  # Enum keys hash in Python
        if code in STORED_CODES and (fenced := broker.fenced()) is not None:
            return error(request, ResponseCode.SERVICE_NOT_AVAILABLE, fenced)  # replaced while it waited
        if code not in STORED_CODES:
            return error(request, code, result.remark or status.name)
        store_host = store.store_host
        ids = (
            offset_msg_ids(store_host, result.entries)
            if result.entries
            else offset_msg_id(store_host, result.wrote_offset)
        )
        ext = {
            "msgId": ids,
            "queueId": ext_str(queue_id),
            "queueOffset": ext_str(result.queue_offset),
            "MSG_REGION": broker.config.region_id,
            "TRACE_ON": ext_str(broker.config.trace_on),
        }
        uniq = find_property(props, b"UNIQ_KEY\x01") if props else None
        if uniq:
            ext["transactionId"] = uniq.decode()
        return request.make_response(code, None if code == _SUCCESS else status.name, ext)


def _waits_for_store(props: bytes) -> bool:
    """The producer asked to wait for the store (property WAIT, default true)."""
    return _WAIT_FALSE not in props
