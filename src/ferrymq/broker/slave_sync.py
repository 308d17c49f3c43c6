"""A slave copies its master's topic table, consumer offsets, subscription groups and the progress
of scheduled messages, delay levels and timer (RocketMQ's SlaveSynchronize).

The CommitLog arrives over the HA port; this metadata comes over remoting every 10 s
(`slave_sync_interval`), so a slave can serve pulls and offset queries when its master is gone
and, promoted, keeps the groups' settings (retries, paused consumption, rate limits) and does not
deliver delayed messages twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from ferrymq.broker.consumption import ConsumptionControl
from ferrymq.broker.groups import SubscriptionGroupManager
from ferrymq.broker.offsets import ConsumerOffsetManager
from ferrymq.broker.schedule.delay import DelayOffsetSerializeWrapper
from ferrymq.broker.schedule.scheduler import Scheduler
from ferrymq.broker.schedule.timer import TimerCheckpoint
from ferrymq.broker.topics import TopicConfigManager
from ferrymq.broker.transactions import CHECK_GROUP
from ferrymq.net import RemotingClient, RemotingError
from ferrymq.protocol.bodies import (
    ConsumerOffsetSerializeWrapper,
    KVTable,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
    decode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.store import MessageStore

log = logging.getLogger(__name__)

CATCH_UP_TIMEOUT = 5.0
"""How long a sync waits for the replicated log to hold the redeliveries behind the master's
scheduled-message progress before taking it (a slave normally trails by milliseconds)."""


class SlaveSynchronizer:
    def __init__(
        self, store: MessageStore, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
        groups: SubscriptionGroupManager, consumption: ConsumptionControl, scheduler: Scheduler,
        client: RemotingClient, *, is_master: Callable[[], bool], learned_master: Callable[[], str | None],
        acted: Callable[[], bool] = lambda: False,
    ) -> None:  # fmt: skip
        """`learned_master()`: the master's address as NameServers last named it; `acted()`: this slave
        acted for its master and has not handed the duties back (its scheduled-message progress is
        the newer one until then)."""
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.groups = groups
        self.consumption = consumption
        self.scheduler = scheduler
        self.client = client
        self.is_master = is_master
        self._learned_master = learned_master
        self._acted = acted
        self.master_addr: str | None = None  # given by the controller; else learned from NameServers

    async def sync(self) -> None:
        addr = self.master_addr or self._learned_master()
        if self.is_master() or not addr:
            return
        try:
            topics = await self._fetch(addr, RequestCode.GET_ALL_TOPIC_CONFIG, TopicConfigSerializeWrapper)
            offsets = await self._fetch(
                addr, RequestCode.GET_ALL_CONSUMER_OFFSET, ConsumerOffsetSerializeWrapper
            )
            groups = await self._fetch(
                addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, SubscriptionGroupWrapper
            )
            delays = await self._fetch(addr, RequestCode.GET_ALL_DELAY_OFFSET, DelayOffsetSerializeWrapper)
            timer = await self._fetch(addr, RequestCode.GET_TIMER_CHECK_POINT, TimerCheckpoint)
            runtime = await self._fetch(addr, RequestCode.GET_BROKER_RUNTIME_INFO, KVTable)
            covered = int(runtime.table.get("commitLogMaxOffset", "0"))  # the redeliveries behind both
        except (RemotingError, ProtocolError, ValueError) as e:
            log.info("cannot copy metadata from master %s: %s", addr, e)
            return
        if self.is_master():  # promoted meanwhile: its own tables are the truth now
            return
        self.topics.adopt(topics)
        checker = _split_checker(offsets)
        self.offsets.adopt(offsets)
        if self.groups.adopt(groups):  # pauses and rate limits hold on the slave's reads too
            self.consumption.update_all(self.groups.groups.values())
        if self._acted():
            return
        if await self._replicated(covered):
            self.offsets.adopt(checker)
            self.scheduler.delays.adopt(delays)
            self.scheduler.timer.adopt(timer)
        else:  # promoted now, it must deliver again (and check again) what it does not have, not lose it
            log.info(
                "scheduled-message and transaction-check progress not copied: this slave is behind its master"
            )

    async def _replicated(self, offset: int) -> bool:
        """Wait (bounded) until this slave's log reaches `offset` of its master's."""
        deadline = time.monotonic() + CATCH_UP_TIMEOUT
        while self.store.commitlog.max_offset < offset:
            if time.monotonic() > deadline or self.is_master():
                return False
            await asyncio.sleep(0.05)
        return True

    async def _fetch(self, addr: str, code: int, body_type):
        response = await self.client.invoke(addr, RemotingCommand(code), 5.0)
        if response.code != ResponseCode.SUCCESS:
            raise RemotingError(f"request {code} refused: {response.remark}")
        return decode_body(body_type, response.body)


def _split_checker(offsets: ConsumerOffsetSerializeWrapper) -> ConsumerOffsetSerializeWrapper:
    """Take the transaction checker's cursors out of `offsets`: they may pass half messages the checker
    re-appended and op records (a commit's intent) this slave does not hold yet, so they are copied only
    once its log has caught up, as the scheduler's progress is."""
    suffix = "@" + CHECK_GROUP
    taken = {key: offsets.offset_table.pop(key) for key in list(offsets.offset_table) if key.endswith(suffix)}
    return ConsumerOffsetSerializeWrapper(offset_table=taken)
