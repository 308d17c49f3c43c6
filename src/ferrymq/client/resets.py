"""RESET_CONSUMER_CLIENT_OFFSET: a broker tells a group's clients to go on from new offsets (an
admin reset the group to a timestamp). A client instance answers each request code with one
handler, and several consumers may share an instance, so one handler per instance passes the
notice to the consumer of the group it names."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable
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

OnReset = Callable[[dict[MessageQueue, int]], Awaitable[None]]

_groups: weakref.WeakKeyDictionary[ClientInstance, dict[str, OnReset]] = weakref.WeakKeyDictionary()


def on_reset(instance: ClientInstance, group: str, callback: OnReset) -> None:
    """Have `callback(offsets)` run when a broker resets `group`'s offsets."""
    groups = _groups.get(instance)
    if groups is None:
        groups = _groups[instance] = {}
        instance.remoting.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, partial(_reset, groups))
    groups[group] = callback


def forget(instance: ClientInstance, group: str) -> None:
    _groups.get(instance, {}).pop(group, None)


async def _reset(groups: dict[str, OnReset], conn: Connection, request: RemotingCommand) -> None:
    try:
        h = ResetOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offsets = decode_reset_offset_body(request.body)
    except ProtocolError as e:
        log.warning("ignoring a bad offset reset notice: %s", e)
        return
    callback = groups.get(h.group)
    if callback is not None:
        log.info("group %s: offsets of %s reset by the broker to %s", h.group, h.topic, h.timestamp)
        await callback(offsets)
