"""A slave copies its master's topic table, consumer offsets, subscription groups and delay-level
progress (RocketMQ's SlaveSynchronize).

The CommitLog arrives over the HA port; this metadata comes over remoting every 10 s, so a slave
can serve pulls and offset queries when its master is gone and, promoted, keeps the groups'
settings (retries, paused consumption, rate limits) and does not deliver delayed messages twice.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ferrymq.broker.schedule.delay import DelayOffsetSerializeWrapper
from ferrymq.net import RemotingError
from ferrymq.protocol.bodies import (
    ConsumerOffsetSerializeWrapper,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
    decode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.remoting import RemotingCommand

if TYPE_CHECKING:
    from ferrymq.broker.server import Broker

log = logging.getLogger(__name__)


class SlaveSynchronizer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.master_addr: str | None = None  # given by the controller; else learned from NameServers

    async def sync(self) -> None:
        broker = self.broker
        addr = self.master_addr or broker.registrar.master_addr
        if broker.is_master or not addr:
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
        except (RemotingError, ProtocolError) as e:
            log.info("cannot copy metadata from master %s: %s", addr, e)
            return
        if broker.is_master:  # promoted meanwhile: its own tables are the truth now
            return
        broker.topics.adopt(topics)
        broker.offsets.adopt(offsets)
        if broker.groups.adopt(groups):  # pauses and rate limits hold on the slave's reads too
            broker.consumption.update_all(broker.groups.groups.values())
        broker.scheduler.delays.adopt(delays)

    async def _fetch(self, addr: str, code: int, body_type):
        response = await self.broker.client.invoke(addr, RemotingCommand(code), 5.0)
        if response.code != ResponseCode.SUCCESS:
            raise RemotingError(f"request {code} refused: {response.remark}")
        return decode_body(body_type, response.body)
