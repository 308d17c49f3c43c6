"""What a slave copies from its master besides the CommitLog (RocketMQ's SlaveSynchronize).

Topic configs, subscription groups and consumer offsets live in the master's config files, not in the
log; a slave fetches them periodically, so that when it becomes master its routes carry the same
topics and consumers carry on from the offsets they committed (give or take one period).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ferrymq.net import RemotingError
from ferrymq.protocol.bodies import (
    ConsumerOffsetSerializeWrapper,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
    decode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand, RemotingProtocolError

if TYPE_CHECKING:
    from ferrymq.broker.server import Broker

log = logging.getLogger(__name__)


async def copy_master_metadata(broker: Broker, master_addr: str) -> bool:
    """Fetch topics, groups and offsets from the master and take them over; False if it did not answer."""
    try:
        topics = await _fetch(
            broker, master_addr, RequestCode.GET_ALL_TOPIC_CONFIG, TopicConfigSerializeWrapper
        )
        groups = await _fetch(
            broker, master_addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, SubscriptionGroupWrapper
        )
        offsets = await _fetch(
            broker, master_addr, RequestCode.GET_ALL_CONSUMER_OFFSET, ConsumerOffsetSerializeWrapper
        )
    except (RemotingError, RemotingProtocolError) as exc:
        log.info("cannot copy metadata from master %s: %s", master_addr, exc)
        return False
    for name, config in topics.topic_config_table.items():
        if broker.topics.get(name) != config:
            broker.topics.put(config)
    for name, config in groups.subscription_group_table.items():
        if broker.groups.groups.get(name) != config:
            broker.groups.put(config)
    for key, queues in offsets.offset_table.items():
        topic, _, group = key.partition("@")
        for queue_id, offset in queues.items():
            if broker.offsets.query(group, topic, queue_id) != offset:
                broker.offsets.commit(group, topic, queue_id, offset)
    return True


async def _fetch(broker: Broker, address: str, code: int, body_type):
    response = await broker.client.invoke(address, RemotingCommand(code), 5.0)
    if response.code != ResponseCode.SUCCESS:
        raise RemotingError(f"request {code} answered {response.code}: {response.remark}")
    return decode_body(body_type, response.body)
