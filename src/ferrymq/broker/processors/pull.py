"""PULL_MESSAGE: read a queue, commit the consumer's offset, and hold empty pulls (long polling)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ferrymq.broker.consumption import held_back
from ferrymq.broker.filters import FilterError
from ferrymq.broker.processors.common import error
from ferrymq.broker.topics import PERM_READ
from ferrymq.net.connection import Connection
from ferrymq.protocol.bodies import SubscriptionGroupConfig
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.store import GetResult, GetStatus

if TYPE_CHECKING:
    from ferrymq.broker.server import Broker

FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 0x1, 0x2, 0x4

_CODES = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


def pull_code(result: GetResult, requested_offset: int) -> int:
    if result.status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if requested_offset else ResponseCode.PULL_NOT_FOUND
    return _CODES[result.status]


class PullProcessor:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def register(self, server) -> None:
        server.register(RequestCode.PULL_MESSAGE, self.pull, eager=True)
        server.register(RequestCode.LITE_PULL_MESSAGE, self.pull, eager=True)

    async def pull(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = PullMessageRequestHeader.from_ext_fields(request.ext_fields)
        broker = self.broker
        if not broker.config.broker_permission & PERM_READ:
            return error(
                request, ResponseCode.NO_PERMISSION, f"broker {broker.config.broker_name} is not readable"
            )
        group_config = broker.groups.get(h.consumer_group)
        if group_config is None:
            return error(
                request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"group {h.consumer_group} does not exist"
            )
        if not group_config.consume_enable:
            return error(request, ResponseCode.NO_PERMISSION, f"group {h.consumer_group} may not consume")
        tc = broker.topics.get(h.topic)
        if tc is None:
            return error(request, ResponseCode.TOPIC_NOT_EXIST, f"topic {h.topic} does not exist")
        if not tc.perm & PERM_READ:
            return error(request, ResponseCode.NO_PERMISSION, f"topic {h.topic} is not readable")
        if not 0 <= h.queue_id < tc.read_queue_nums:
            return error(
                request, ResponseCode.SYSTEM_ERROR,
                f"queueId {h.queue_id} is illegal: topic {h.topic} has {tc.read_queue_nums} read queues",
            )  # fmt: skip
        if h.sys_flag & FLAG_SUBSCRIPTION:
            expression, expression_type = h.subscription, h.expression_type
        else:
            sub = broker.clients.subscription(h.consumer_group, h.topic)
            if sub is None:
                return error(
                    request, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"group {h.consumer_group} has no subscription to {h.topic}: heartbeat first",
                )  # fmt: skip
            expression, expression_type = sub.sub_string, sub.expression_type
        try:
            flt = broker.filters.get(expression, expression_type)
        except FilterError as e:
            return error(request, e.code, str(e))
        if not broker.serves_reads:  # RocketMQ: a slave without slave_read_enable sends consumers away
            header = PullMessageResponseHeader(
                suggest_which_broker_id=MASTER_ID,
                next_begin_offset=h.queue_offset,
                min_offset=broker.store.get_min_offset(h.topic, h.queue_id),
                max_offset=broker.store.get_max_offset(h.topic, h.queue_id),
            )
            return request.make_response(
                ResponseCode.PULL_RETRY_IMMEDIATELY, "slave read disabled: pull from the master",
                header.to_ext_fields(),
            )  # fmt: skip
        if h.sys_flag & FLAG_COMMIT_OFFSET and h.commit_offset >= 0 and broker.is_master:
            broker.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)

        config = broker.config
        max_count = min(h.max_msg_nums, config.max_transfer_count_on_message_in_memory)
        max_bytes = min(h.max_msg_bytes or config.max_transfer_bytes_on_message_in_memory,
                        config.max_transfer_bytes_on_message_in_memory)  # fmt: skip
        store, tags, group, control = broker.store, flt.tag_codes, h.consumer_group, broker.consumption
        suspend = h.sys_flag & FLAG_SUSPEND
        long_poll = config.long_polling_enable and suspend
        timeout = (h.suspend_timeout_millis if long_poll else config.short_polling_time_mills) / 1000

        def read(count: int) -> GetResult:
            """Up to `count` messages; none when consumption control admitted none."""
            if not count:
                return held_back(store, h.topic, h.queue_id, h.queue_offset)
            found = store.get_messages(h.topic, h.queue_id, h.queue_offset, count, max_bytes, tags)
            found = found if flt.sql is None else flt.narrow(found)
            control.took(group, found.message_count)
            return found

        # a paused or rate-limited group is held here (like a long poll) until it may take some
        count = await control.admit(group, conn, max_count, timeout) if control.gate(group) else max_count
        result = read(count)
        code = pull_code(result, h.queue_offset)
        if code == ResponseCode.PULL_NOT_FOUND and suspend and count:
            await broker.hold.wait(
                h.topic,
                h.queue_id,
                timeout,
                lambda: store.get_max_offset(h.topic, h.queue_id) <= h.queue_offset,
            )
            count = await control.admit(group, conn, count, 0) if control.gate(group) else count
            result = read(count)
            code = pull_code(result, h.queue_offset)
        header = PullMessageResponseHeader(
            suggest_which_broker_id=self._suggested_broker_id(group_config, h.topic, h.queue_id, result),
            next_begin_offset=result.next_begin_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
        )
        body = b"".join(result.buffers) if code == ResponseCode.SUCCESS else b""
        return request.make_response(code, result.status.name, header.to_ext_fields(), body)

    def _suggested_broker_id(self, group: SubscriptionGroupConfig, topic: str, queue_id: int, result) -> int:
        """RocketMQ's suggestWhichBrokerId: with slave_read_enable, a consumer reading further behind
        the CommitLog's end than `access_message_in_memory_max_ratio` of RAM (off the page cache, on
        disk) is sent to `which_broker_when_consume_slowly`, others to the group's `broker_id`;
        without it, always to the master."""
        config = self.broker.config
        if not config.slave_read_enable:
            return MASTER_ID
        lagging = False
        if result.message_count:
            cq = self.broker.store.queues.get(topic, queue_id)
            last = cq.entry(result.next_begin_offset - 1) if cq is not None else None
            if last is not None:
                behind = self.broker.store.commitlog.max_offset - last[0]
                lagging = behind > _PHYSICAL_MEMORY * config.access_message_in_memory_max_ratio / 100
        return group.which_broker_when_consume_slowly if lagging else group.broker_id


MASTER_ID = 0
_PHYSICAL_MEMORY = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
