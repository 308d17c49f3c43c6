"""What brokers tell a consumer group's clients: NOTIFY_CONSUMER_IDS_CHANGED (the membership
changed: rebalance now) and RESET_CONSUMER_CLIENT_OFFSET (an admin reset the group's offsets: go on
from these). A client instance answers each request code with one handler, and several consumers
may share an instance, so one handler per instance passes each notice to the consumer of the group
it names."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

from ferrymq.client.instance import ClientInstance
from ferrymq.client.message import MessageQueue
from ferrymq.net import Connection
from ferrymq.protocol.bodies import decode_reset_offset_body
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.headers import ResetOffsetRequestHeader
from ferrymq.protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupListener:
    ids_changed: Callable[[], None]
    reset: Callable[[dict[MessageQueue, int]], Awaitable[None]]


_groups: weakref.WeakKeyDictionary[ClientInstance, dict[str, GroupListener]] = weakref.WeakKeyDictionary()


def listen(instance: ClientInstance, group: str, listener: GroupListener) -> None:
    groups = _groups.get(instance)
    if groups is None:
        groups = _groups[instance] = {}
        instance.remoting.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, partial(_ids_changed, groups))
        instance.remoting.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, partial(_reset, groups))
    groups[group] = listener


def forget(instance: ClientInstance, group: str) -> None:
    _groups.get(instance, {}).pop(group, None)


async def _ids_changed(groups: dict[str, GroupListener], conn: Connection, request: RemotingCommand) -> None:
    group = request.ext_fields.get("consumerGroup")
    for name, listener in [(group, groups[group])] if group in groups else list(groups.items()):
        log.info("group %s changed: rebalancing now", name)
        listener.ids_changed()


async def _reset(groups: dict[str, GroupListener], conn: Connection, request: RemotingCommand) -> None:
    try:
        h = ResetOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offsets = decode_reset_offset_body(request.body)
    except ProtocolError as e:
        log.warning("ignoring a bad offset reset notice: %s", e)
        return
    listener = groups.get(h.group)
    if listener is not None:
        log.info("group %s: offsets of %s reset by the broker to %s", h.group, h.topic, h.timestamp)
        await listener.reset(offsets)
