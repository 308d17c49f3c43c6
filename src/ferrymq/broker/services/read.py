"""Reading messages by queue and offset: every rule between "a consumer asked" and "here they are".

Permissions (broker, group, topic), the queue, the subscription and its filter (tags, SQL92), the
consumption gate (a paused or rate-limited group), long polling, a slave sending consumers to its
master and the master suggesting a slave to a consumer far behind; and the consumer's committed
offset, which a read may carry along.
"""

from __future__ import annotations

import os
from typing import Protocol

from ferrymq.broker.clients import ClientRegistry
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.consumption import ConsumptionControl, held_back
from ferrymq.broker.filters import FilterCache, FilterError
from ferrymq.broker.groups import SubscriptionGroupManager
from ferrymq.broker.long_polling import PullHoldService
from ferrymq.broker.offsets import ConsumerOffsetManager
from ferrymq.broker.services.outcomes import ReadOutcome
from ferrymq.broker.topics import PERM_READ, TopicConfigManager
from ferrymq.metrics.tally import Tally
from ferrymq.protocol.bodies import SubscriptionGroupConfig
from ferrymq.protocol.codes import ResponseCode
from ferrymq.store import GetResult, GetStatus, MessageStore

MASTER_ID = 0
_PHYSICAL_MEMORY = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

_CODES = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}
_PULL_NOT_FOUND = ResponseCode.PULL_NOT_FOUND


def read_code(result: GetResult, requested_offset: int) -> int:
    """The response code of a store read (RocketMQ's pull status mapping)."""
    if result.status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if requested_offset else ResponseCode.PULL_NOT_FOUND
    return _CODES[result.status]


class ReaderRole(Protocol):
    """What the read rules ask of the broker's current role (it changes while the broker runs)."""

    @property
    def is_master(self) -> bool: ...

    @property
    def serves_reads(self) -> bool: ...


class ReadService:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        clients: ClientRegistry,
        filters: FilterCache,
        consumption: ConsumptionControl,
        hold: PullHoldService,
        role: ReaderRole,
    ) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.clients = clients
        self.filters = filters
        self.consumption = consumption
        self.delivered: Tally[tuple[str, str]] = Tally()  # (topic, group) pulled, for metrics
        self.reads_found = 0  # pulls answered with messages, and without (for getFoundTps, getMissTps)
        self.reads_missed = 0
        self.pulled: dict[tuple[str, str, int], int] = {}  # (topic, group, queue) → next offset pulled
        self.hold = hold
        self.role = role

    async def read(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int = 0,
        expression: str | None = None,
        expression_type: str | None = None,
        commit_offset: int = -1,
        suspend: bool = False,
        suspend_timeout_ms: int = 0,
        origin: object = None,
    ) -> ReadOutcome:
        """Up to `max_count` messages (and `max_bytes`, 0: the broker's limit) of `group` from the
        queue at `offset`, filtered by `expression` (None: the subscription the group's consumer
        registered by heartbeat). With `suspend`, an empty read waits up to `suspend_timeout_ms`
        for a message (long polling). `commit_offset` >= 0 is committed for the group first.
        `origin` is the consumer's connection as registered by its heartbeat, which pausing a
        single client matches (None: a consumer that never registered)."""
        config = self.config
        if not config.broker_permission & PERM_READ:
            return ReadOutcome(ResponseCode.NO_PERMISSION, f"broker {config.broker_name} is not readable")
        group_config = self.groups.get(group)
        if group_config is None:
            return ReadOutcome(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"group {group} does not exist")
        if not group_config.consume_enable:
            return ReadOutcome(ResponseCode.NO_PERMISSION, f"group {group} may not consume")
        tc = self.topics.get(topic)
        if tc is None:
            return ReadOutcome(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist")
        if not tc.perm & PERM_READ:
            return ReadOutcome(ResponseCode.NO_PERMISSION, f"topic {topic} is not readable")
        if not 0 <= queue_id < tc.read_queue_nums:
            return ReadOutcome(ResponseCode.SYSTEM_ERROR,
                               f"queueId {queue_id} is illegal: topic {topic} has {tc.read_queue_nums} "
                               "read queues")  # fmt: skip
        if expression is None:
            sub = self.clients.subscription(group, topic)
            if sub is None:
                return ReadOutcome(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"group {group} has no subscription to {topic}: heartbeat first",
                )
            expression, expression_type = sub.sub_string, sub.expression_type
        try:
            flt = self.filters.get(expression, expression_type)
        except FilterError as e:
            return ReadOutcome(e.code, str(e))
        store, role = self.store, self.role
        if not role.serves_reads:  # RocketMQ: a slave without slave_read_enable sends consumers away
            return ReadOutcome(
                ResponseCode.PULL_RETRY_IMMEDIATELY, "slave read disabled: pull from the master", offset,
                store.get_min_offset(topic, queue_id), store.get_max_offset(topic, queue_id), MASTER_ID,
            )  # fmt: skip
        if commit_offset >= 0 and role.is_master:
            self.offsets.commit(group, topic, queue_id, commit_offset)

        limit = config.max_transfer_bytes_on_message_in_memory
        max_count = min(max_count, config.max_transfer_count_on_message_in_memory)
        max_bytes = min(max_bytes or limit, limit)
        tags, control = flt.tag_codes, self.consumption
        long_poll = config.long_polling_enable and suspend
        timeout = (suspend_timeout_ms if long_poll else config.short_polling_time_mills) / 1000

        def get(count: int) -> GetResult:
            """Up to `count` messages; none when consumption control admitted none."""
            if not count:
                return held_back(store, topic, queue_id, offset)
            found = store.get_messages(topic, queue_id, offset, count, max_bytes, tags)
            found = found if flt.sql is None else flt.narrow(found)
            control.took(group, found.message_count, topic, origin, found.total_size)
            return found

        # a paused or rate-limited group is held here (like a long poll) until it may take some
        watched = control.watches(group)
        count = await control.admit(group, origin, max_count, timeout, topic) if watched else max_count
        result = get(count)
        code = read_code(result, offset)
        if code == _PULL_NOT_FOUND and suspend and count:
            await self.hold.wait(
                topic, queue_id, timeout, lambda: store.get_max_offset(topic, queue_id) <= offset
            )
            count = await control.admit(group, origin, count, 0, topic) if control.watches(group) else count
            result = get(count)
            code = read_code(result, offset)
        if result.message_count:
            self.reads_found += 1
            self.delivered.add((topic, group), result.message_count, result.total_size)
            self.pulled[(topic, group, queue_id)] = result.next_begin_offset
        else:
            self.reads_missed += 1
        return ReadOutcome(
            code, result.status.name, result.next_begin_offset, result.min_offset, result.max_offset,
            self._suggested_broker_id(group_config, topic, queue_id, result), result.buffers,
        )  # fmt: skip

    def _suggested_broker_id(
        self, group: SubscriptionGroupConfig, topic: str, queue_id: int, result: GetResult
    ) -> int:
        """RocketMQ's suggestWhichBrokerId: with slave_read_enable, a consumer reading further behind
        the CommitLog's end than `access_message_in_memory_max_ratio` of RAM (off the page cache, on
        disk) is sent to `which_broker_when_consume_slowly`, others to the group's `broker_id`;
        without it, always to the master."""
        config = self.config
        if not config.slave_read_enable:
            return MASTER_ID
        lagging = False
        if result.message_count:
            cq = self.store.queues.get(topic, queue_id)
            last = cq.entry(result.next_begin_offset - 1) if cq is not None else None
            if last is not None:
                behind = self.store.commitlog.max_offset - last[0]
                lagging = behind > _PHYSICAL_MEMORY * config.access_message_in_memory_max_ratio / 100
        return group.which_broker_when_consume_slowly if lagging else group.broker_id

    # --- the consumer's position -------------------------------------------------------------------

    def committed_offset(self, group: str, topic: str, queue_id: int, zero_if_new: bool = True) -> int | None:
        """The group's committed offset of the queue, or None if it has none. A group that never
        committed starts at 0 while the queue still holds its first message (RocketMQ's rule, with
        `zero_if_new`), so consuming from the last offset misses nothing on a new topic."""
        offset = self.offsets.query(group, topic, queue_id)
        if offset is None and zero_if_new and self.store.get_min_offset(topic, queue_id) == 0:
            return 0
        return offset

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.offsets.commit(group, topic, queue_id, offset)
