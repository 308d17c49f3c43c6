"""Putting messages: every rule between "a producer sent this" and "it is stored as acknowledged".

Checks (role, fencing, permissions, topic name and queue), topic auto-creation, where a message is
really stored (half messages of transactions, retries past their limit to the DLQ, delayed and timed
messages held back in system topics), the store's put, and the flush and replica waits the producer
asked for. A consumer's failed message comes back here too (``send_back``: retry later or
dead-letter it).
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.groups import SubscriptionGroupManager
from ferrymq.broker.quota import QuotaLimiter
from ferrymq.broker.schedule import TIMER_TOPIC, ScheduleError
from ferrymq.broker.schedule.divert import may_divert
from ferrymq.broker.schedule.intents import INTENT_TOPIC
from ferrymq.broker.services.outcomes import STORED_CODES, SendOutcome
from ferrymq.broker.services.writer import MessageWriter
from ferrymq.broker.topics import (
    DLQ_GROUP_PREFIX,
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_PREFIX,
    TopicConfigManager,
)
from ferrymq.ha.dledger.command import PutCommand
from ferrymq.metrics.tally import Tally
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.message_ext import decode_record
from ferrymq.protocol.message_id import offset_msg_id, offset_msg_ids
from ferrymq.protocol.properties import Prop, decode_properties, encode_properties, find_property
from ferrymq.protocol.recall import RecallHandle
from ferrymq.protocol.record import pack_host
from ferrymq.protocol.sys_flag import TRANSACTION_TYPE_MASK
from ferrymq.protocol.topic_names import (
    AUTO_CREATE_TOPIC,
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    OFFSET_MOVED_EVENT,
    OP_TOPIC,
    SCHEDULE_TOPIC,
    topic_problem,
)
from ferrymq.store import MessageStore, PutStatus

DLQ_NUMS_PER_GROUP = 1
NOT_SENDABLE_TOPICS = frozenset({
    SCHEDULE_TOPIC, TIMER_TOPIC, INTENT_TOPIC, HALF_TOPIC, OP_TOPIC, CHECK_MAX_TIME_TOPIC,
    OFFSET_MOVED_EVENT,
})  # fmt: skip
"""Only the broker writes these (RocketMQ's TopicValidator.isNotAllowedSendTopic): a producer's send,
batch or half message to one is refused. SELF_TEST_TOPIC stays open: the AMQP gateway's resource
alarm probes with it (amqp/alarm.py)."""
_DLQ_PERM = PERM_READ | PERM_WRITE  # RocketMQ 5 makes DLQs readable, so dead letters can be re-sent

PUT_STATUS_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.DISK_FULL: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.CREATE_MAPPED_FILE_FAILED: ResponseCode.SYSTEM_ERROR,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: ResponseCode.SYSTEM_ERROR,
}

_WAIT_FALSE = b"WAIT\x01false"
_TRAN_MSG = b"TRAN_MSG\x01true"
_UNIQ_KEY = b"UNIQ_KEY\x01"
_TIMER_OUT_MS = b"TIMER_OUT_MS\x01"
# Plain values of the names every put compares against (an enum attribute costs a look-up each time).
_PUT_OK = PutStatus.PUT_OK
_SUCCESS = int(ResponseCode.SUCCESS)
_MESSAGE_ILLEGAL = int(ResponseCode.MESSAGE_ILLEGAL)

Divert = Callable[[bytes, str, int, int], "tuple[str, int, bytes] | None"]


def _slave(config: BrokerConfig) -> SendOutcome:
    """RocketMQ's answer from a slave: producers and consumers retry on the master."""
    return SendOutcome(
        ResponseCode.SERVICE_NOT_AVAILABLE, f"broker {config.broker_name} is a slave: it takes no writes"
    )


def _not_created(topics: TopicConfigManager, topic: str, config: BrokerConfig) -> str:
    """Why a send to a missing topic did not create it."""
    if config.auto_create_topic_enable and topics.held_after_delete(topic):
        return (f"topic {topic} was deleted on broker {config.broker_name} (moved?) and is not "
                "auto-created again for auto_create_hold_after_delete ms: fetch its route again")  # fmt: skip
    return f"topic {topic} does not exist and auto-creation is off"


class WriterRole(Protocol):
    """What the put rules ask of the broker's current role (it changes while the broker runs)."""

    @property
    def is_master(self) -> bool: ...

    @property
    def waits_for_replicas(self) -> bool: ...

    def fenced(self) -> str | None: ...


class PutService:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        role: WriterRole,
        *,
        divert: Divert,
        half: Callable[[str, int, bytes], bytes],
        replicated: Callable[[int, float], Awaitable[PutStatus]],
        written: Callable[[], None],
        topics_changed: Callable[[], None],
        writer: MessageWriter,
        quotas: QuotaLimiter | None = None,
    ) -> None:
        """`divert`: the scheduler's (where a delayed or timed message waits; raises ScheduleError);
        `half`: the transaction service's properties of a half message; `replicated(offset, timeout)`:
        waits until replicas hold the log up to offset; `written`: after every put (dispatch soon);
        `topics_changed`: after an auto-creation (tell the NameServers); `quotas`: the producers'
        rate limits (over them a put is refused with flow control, SYSTEM_BUSY); `writer`: the
        broker's (in DLedger mode messages are stored through Raft instead of into `store` at once)."""
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.role = role
        self._divert = divert
        self._half = half
        self._replicated = replicated
        self._written = written
        self._topics_changed = topics_changed
        self.quotas = quotas if quotas is not None else QuotaLimiter()
        self.writer = writer
        self.stored: Tally[str] = Tally()  # topic → messages and bytes stored, for the metrics collector

    async def put(
        self,
        topic: str,
        queue_id: int,
        body: bytes | memoryview,
        properties: bytes,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: bytes | None = None,
        reconsume_times: int = 0,
        max_reconsume_times: int | None = None,
        batch: bool = False,
        default_topic: str = AUTO_CREATE_TOPIC,
        default_queue_nums: int = 4,
        user: str | None = None,
    ) -> SendOutcome:
        """Store one message (or, with `batch`, a body of RocketMQ's batch encoding) in `topic`.

        `queue_id` < 0 picks a queue at random; `properties` are RocketMQ's encoded properties;
        `born_host` the packed producer address (default: this broker's). A new topic is made from
        `default_topic` if auto-creation is on. Arguments are positional-friendly: adapters call
        this once per request. `user`: the producer's AccessKey, for per-user quotas."""
        config = self.config
        role = self.role
        if not role.is_master:
            return _slave(config)
        if (fenced := role.fenced()) is not None:
            return SendOutcome(ResponseCode.SERVICE_NOT_AVAILABLE, fenced)
        if not config.broker_permission & PERM_WRITE:
            return SendOutcome(ResponseCode.NO_PERMISSION, f"broker {config.broker_name} is not writable")
        if topic in NOT_SENDABLE_TOPICS:
            return SendOutcome(ResponseCode.NO_PERMISSION, f"sending to system topic {topic} is forbidden")
        quotas = self.quotas
        if quotas.produce and (refusal := quotas.admit_put(topic, user)) is not None:
            return SendOutcome(ResponseCode.SYSTEM_BUSY, refusal)
        tc = self.topics.get(topic)
        if tc is None:
            problem = topic_problem(topic)
            if problem:
                return SendOutcome(_MESSAGE_ILLEGAL, problem)
            if config.auto_create_topic_enable:
                tc = self.topics.create_from_template(topic, default_topic, default_queue_nums)
                if tc is not None:
                    self._topics_changed()
            if tc is None:
                return SendOutcome(ResponseCode.TOPIC_NOT_EXIST, _not_created(self.topics, topic, config))
        if not tc.perm & PERM_WRITE:
            return SendOutcome(ResponseCode.NO_PERMISSION, f"topic {topic} is not writable")
        if queue_id < 0:
            queue_id = random.randrange(tc.write_queue_nums)
        elif queue_id >= tc.write_queue_nums:
            return SendOutcome(ResponseCode.SYSTEM_ERROR,
                               f"queueId {queue_id} is illegal: topic {topic} has {tc.write_queue_nums} "
                               "write queues")  # fmt: skip
        store = self.store
        if born_host is None:
            born_host = store.store_host
        logged = self.writer.replicated_log  # DLedger mode: every put goes through the writer
        if logged is not None and not born_timestamp:  # every member stores the leader's
            born_timestamp = time.time_ns() // 1_000_000
        if batch:
            store_topic, store_props = topic, b""
            if logged is not None:
                result = await self.writer.put(
                    PutCommand(topic, queue_id, body, b"", 0, sys_flag, born_timestamp, born_host, batch=True)
                )
            else:
                result = store.put_batch(topic, queue_id, body, sys_flag=sys_flag,
                                         born_timestamp=born_timestamp, born_host=born_host)  # fmt: skip
        else:
            if (
                _TRAN_MSG in properties
            ):  # a half message (RocketMQ goes by this property): hidden until committed
                try:  # a delay or delivery time is applied at commit; refuse a bad one now
                    self._divert(properties, topic, queue_id, sys_flag & ~TRANSACTION_TYPE_MASK)
                except ScheduleError as e:
                    return SendOutcome(_MESSAGE_ILLEGAL, str(e))
                properties = store_props = self._half(topic, queue_id, properties)
                sys_flag, store_topic, store_queue = sys_flag & ~TRANSACTION_TYPE_MASK, HALF_TOPIC, 0
            elif topic.startswith(RETRY_GROUP_PREFIX) or may_divert(properties):
                # retries past their limit go to the DLQ, delayed and timed messages wait
                destination = self._destination(topic, queue_id, properties, sys_flag, reconsume_times,
                                                max_reconsume_times)  # fmt: skip
                if isinstance(destination, SendOutcome):
                    return destination
                store_topic, store_queue, store_props = destination
            else:  # the common case: stored as sent
                store_topic, store_queue, store_props = topic, queue_id, properties
            if logged is not None:
                result = await self.writer.put(
                    PutCommand(store_topic, store_queue, body, store_props, flag, sys_flag, born_timestamp,
                               born_host, reconsume_times)
                )  # fmt: skip
            else:
                result = store.put_message(store_topic, store_queue, body, store_props, flag, sys_flag,
                                           born_timestamp, born_host, reconsume_times)  # fmt: skip
        status = result.status
        if status is _PUT_OK:
            self._written()
            self.stored.add(topic, result.message_count, result.wrote_bytes)
            if quotas.produce:
                quotas.charge_put(topic, user, result.message_count, len(body))
            if (
                _WAIT_FALSE not in properties
            ):  # the producer waits for the store (property WAIT, default true)
                if result.flush_future is not None:
                    status = await result.durable()
                if status is _PUT_OK and role.waits_for_replicas:
                    timeout = config.store.sync_flush_timeout / 1000
                    status = await self._replicated(result.wrote_offset + result.wrote_bytes, timeout)
        code = _SUCCESS if status is _PUT_OK else PUT_STATUS_CODES[status]  # Enum keys hash in Python
        if code not in STORED_CODES:
            return SendOutcome(code, result.remark or status.name)
        if (fenced := role.fenced()) is not None:
            return SendOutcome(ResponseCode.SERVICE_NOT_AVAILABLE, fenced)  # replaced while it waited
        msg_id = (
            offset_msg_ids(store.store_host, result.entries)
            if result.entries
            else offset_msg_id(store.store_host, result.wrote_offset)
        )
        uniq = find_property(properties, _UNIQ_KEY) if properties else None
        remark = None if code == _SUCCESS else status.name
        recall = None
        if store_topic == TIMER_TOPIC and uniq and not topic.startswith(RETRY_GROUP_PREFIX):
            due = find_property(store_props, _TIMER_OUT_MS)
            if due is not None and due.isdigit():  # one past the slot's start: due within that slot
                recall = RecallHandle(topic, config.broker_name, int(due) + 1, uniq.decode()).encode()
        return SendOutcome(
            code,
            remark,
            config.broker_name,
            queue_id,
            result.queue_offset,
            msg_id,
            uniq.decode() if uniq else None,
            recall,
        )

    def _destination(
        self, topic: str, queue_id: int, props: bytes, sys_flag: int, reconsume_times: int,
        max_reconsume_times: int | None,
    ) -> tuple[str, int, bytes] | SendOutcome:  # fmt: skip
        """Where a sent message is stored: (topic, queue id, properties), or why it may not be.

        A send to %RETRY%<group> whose reconsumeTimes passed the maximum (the request's, else the
        group's) goes to %DLQ%<group> (RocketMQ's handleRetryAndDLQ); a message with DELAY or a
        delivery time is held back in a system topic until due.
        """
        if topic.startswith(RETRY_GROUP_PREFIX):
            name = topic[len(RETRY_GROUP_PREFIX) :]
            group = self.groups.get(name)
            if group is None:
                return SendOutcome(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                   f"subscription group {name} does not exist")  # fmt: skip
            max_times = group.retry_max_times if max_reconsume_times is None else max_reconsume_times
            if (reconsume_times or 0) > max_times:
                topic, queue_id = self._ensure(DLQ_GROUP_PREFIX + name, DLQ_NUMS_PER_GROUP, _DLQ_PERM), 0
                values = decode_properties(props)
                values[Prop.DELAY] = "-1"  # as RocketMQ marks it: a dead letter is never held back
                return topic, queue_id, encode_properties(values).encode()
        try:
            diverted = self._divert(props, topic, queue_id, sys_flag)
        except ScheduleError as e:
            return SendOutcome(_MESSAGE_ILLEGAL, str(e))
        return diverted or (topic, queue_id, props)

    async def send_back(
        self, group: str, commit_log_offset: int, delay_level: int, max_reconsume_times: int | None = None
    ) -> SendOutcome:
        """A consumer of `group` failed the message stored at `commit_log_offset`: store it again in
        %RETRY%<group> with a growing delay (level 3 + times consumed again), or in %DLQ%<group> once
        it reached the group's (or the given) maximum or when asked so with a negative delay level.
        A group that wants no retries drops it (SUCCESS)."""
        config = self.config
        if not self.role.is_master:
            return _slave(config)
        group_config = self.groups.get(group)
        if group_config is None:
            return SendOutcome(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                               f"subscription group {group} does not exist")  # fmt: skip
        if not config.broker_permission & PERM_WRITE:
            return SendOutcome(ResponseCode.NO_PERMISSION, f"broker {config.broker_name} is not writable")
        if group_config.retry_queue_nums <= 0:
            return SendOutcome(ResponseCode.SUCCESS, None)
        topic = self._ensure(RETRY_GROUP_PREFIX + group, group_config.retry_queue_nums)
        tc = self.topics.get(topic)
        if tc is None or not tc.perm & PERM_WRITE:
            return SendOutcome(ResponseCode.NO_PERMISSION, f"topic {topic} is not writable")
        record = self.store.look_message_by_offset(commit_log_offset)
        try:
            msg = decode_record(record) if record is not None else None
        except MessageDecodeError:
            msg = None
        if msg is None:
            return SendOutcome(
                ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {commit_log_offset}"
            )
        props = msg.properties
        props.setdefault(Prop.RETRY_TOPIC, msg.topic)
        props[Prop.ORIGIN_MESSAGE_ID] = props.get(Prop.ORIGIN_MESSAGE_ID) or msg.offset_msg_id
        max_times = group_config.retry_max_times if max_reconsume_times is None else max_reconsume_times
        queue_id = random.randrange(group_config.retry_queue_nums)
        if msg.reconsume_times >= max_times or delay_level < 0:
            topic, queue_id = self._ensure(DLQ_GROUP_PREFIX + group, DLQ_NUMS_PER_GROUP, _DLQ_PERM), 0
            props.pop(Prop.DELAY, None)
        else:
            props[Prop.DELAY] = str(delay_level or 3 + msg.reconsume_times)
        raw = encode_properties(props).encode()
        try:
            diverted = self._divert(raw, topic, queue_id, msg.sys_flag)
        except ScheduleError as e:
            return SendOutcome(_MESSAGE_ILLEGAL, str(e))
        store_topic, store_queue, raw = diverted or (topic, queue_id, raw)
        born_host = pack_host(*msg.born_host)
        again = PutCommand(store_topic, store_queue, msg.body, raw, msg.flag, msg.sys_flag,
                           msg.born_timestamp, born_host, msg.reconsume_times + 1)  # fmt: skip
        result = await self.writer.put(again)
        if result.status is not _PUT_OK:
            return SendOutcome(PUT_STATUS_CODES.get(result.status, ResponseCode.SYSTEM_ERROR),
                               result.remark or result.status.name)  # fmt: skip
        self._written()
        return SendOutcome(ResponseCode.SUCCESS, None, config.broker_name, queue_id, result.queue_offset)

    def _ensure(self, topic: str, queue_nums: int, perm: int = PERM_READ | PERM_WRITE) -> str:
        if self.topics.ensure(topic, queue_nums, perm):
            self._topics_changed()
        return topic
