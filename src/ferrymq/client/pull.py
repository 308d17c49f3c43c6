"""One PULL_MESSAGE round trip and the offset calls around it, shared by every consumer kind."""

from __future__ import annotations

import contextlib
import enum
from dataclasses import dataclass
from typing import TypedDict, Unpack

from ferrymq.client.instance import ClientError, ClientInstance, TopicRoute
from ferrymq.client.message import MessageExt, MessageQueue
from ferrymq.client.selector import MessageSelector
from ferrymq.net import RemotingError
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.message_ext import CompressedBodyError, decode_records, decompress_body
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.protocol.sys_flag import COMPRESSED_FLAG

FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 0x1, 0x2, 0x4


EVERY_TAG = MessageSelector()


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt]


@dataclass
class RawPullResult:
    """A pull answer with the stored records left as bytes (for readers that decode in bulk)."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    body: bytes | memoryview


class PullOptions(TypedDict, total=False):
    """pull_raw's options, which pull passes on."""

    max_messages: int
    suspend_ms: int
    commit_offset: int | None


async def pull(
    instance: ClientInstance,
    addr: str,
    mq: MessageQueue,
    group: str,
    offset: int,
    *,
    selector: MessageSelector = EVERY_TAG,
    **options: Unpack[PullOptions],
) -> PullResult:
    """Pull from one queue and decode the messages; `options` are pull_raw's (max_messages,
    suspend_ms: how long the broker holds an empty pull, commit_offset).

    Tags are checked here too: the broker filters by tag hash, and hashes collide. (SQL92
    selectors are evaluated by the broker alone.)

    Compressed bodies are decompressed. One that does not decompress ends the answer before it, so
    the next pull starts at that message and raises its CompressedBodyError: the consumer gets
    everything before it, and the error names it, rather than skipping it or raising garbage.
    """
    raw = await pull_raw(instance, addr, mq, group, offset, selector=selector, **options)
    messages = decode_records(raw.body) if raw.status is PullStatus.FOUND else []
    tags = selector.tags()
    if tags is not None:
        messages = [m for m in messages if m.tags in tags]
    for i, m in enumerate(messages):
        if m.sys_flag & COMPRESSED_FLAG:  # checked here: a call per message would cost more than the rest
            try:
                decompress_body(m)
            except CompressedBodyError:
                if i == 0:
                    raise
                return PullResult(raw.status, m.queue_offset, raw.min_offset, raw.max_offset, messages[:i])
    return PullResult(raw.status, raw.next_begin_offset, raw.min_offset, raw.max_offset, messages)


async def pull_raw(
    instance: ClientInstance,
    addr: str,
    mq: MessageQueue,
    group: str,
    offset: int,
    *,
    selector: MessageSelector = EVERY_TAG,
    max_messages: int = 32,
    suspend_ms: int = 0,
    commit_offset: int | None = None,
) -> RawPullResult:
    """One PULL_MESSAGE, the records left undecoded: the broker's filter only, bodies as stored.
    With `suspend_ms` the broker holds an empty pull that long (long polling)."""
    sys_flag = FLAG_SUBSCRIPTION | (FLAG_SUSPEND if suspend_ms else 0)
    if commit_offset is not None:
        sys_flag |= FLAG_COMMIT_OFFSET
    ext = {
        "consumerGroup": group,
        "topic": mq.topic,
        "queueId": str(mq.queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": str(max_messages),
        "sysFlag": str(sys_flag),
        "commitOffset": str(commit_offset if commit_offset is not None else -1),
        "suspendTimeoutMillis": str(suspend_ms),
        "subscription": selector.expression,
        "subVersion": "0",
        "expressionType": selector.type,
    }
    timeout = instance.request_timeout + suspend_ms / 1000
    try:
        response = await instance.invoke(
            addr, RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=ext), timeout
        )
    except RemotingError as e:
        # The broker may be gone: the next pull goes where a fresh route says (a slave, a new master).
        instance.suggested_broker_ids.pop(mq, None)
        with contextlib.suppress(ClientError, RemotingError):
            await instance.refresh_route(mq.topic)
        raise ClientError(f"pull from {mq.broker_name} queue {mq.queue_id} failed: {e}") from e
    status = _STATUS.get(response.code)
    if status is None:
        raise ClientError(f"pull from {mq.broker_name} refused: {response.remark}")
    h = response.ext_fields
    instance.suggested_broker_ids[mq] = int(h.get("suggestWhichBrokerId") or 0)
    body = response.body if status is PullStatus.FOUND else b""
    return RawPullResult(status, int(h["nextBeginOffset"]), int(h["minOffset"]), int(h["maxOffset"]), body)


async def query_offset(instance: ClientInstance, addr: str, mq: MessageQueue, group: str) -> int | None:
    """The group's committed offset for a queue, or None if it never committed one."""
    ext = {"consumerGroup": group, "topic": mq.topic, "queueId": str(mq.queue_id)}
    response = await instance.invoke(addr, RemotingCommand(RequestCode.QUERY_CONSUMER_OFFSET, ext_fields=ext))
    if response.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    if response.code != ResponseCode.SUCCESS:
        raise ClientError(f"query offset failed: {response.remark}")
    return int(response.ext_fields["offset"])


async def commit_offset(
    instance: ClientInstance, addr: str, mq: MessageQueue, group: str, offset: int
) -> None:
    ext = {
        "consumerGroup": group,
        "topic": mq.topic,
        "queueId": str(mq.queue_id),
        "commitOffset": str(offset),
    }
    await instance.remoting.invoke_oneway(
        addr, RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=ext)
    )


async def queue_offset(instance: ClientInstance, addr: str, mq: MessageQueue, code: int, **extra: str) -> int:
    """GET_MAX_OFFSET, GET_MIN_OFFSET or SEARCH_OFFSET_BY_TIMESTAMP (`timestamp=...`) for a queue."""
    ext = {"topic": mq.topic, "queueId": str(mq.queue_id), **extra}
    response = await instance.invoke(addr, RemotingCommand(code, ext_fields=ext))
    if response.code != ResponseCode.SUCCESS:
        raise ClientError(f"offset request {code} failed: {response.remark}")
    return int(response.ext_fields["offset"])


async def master_addr(instance: ClientInstance, mq: MessageQueue) -> str:
    """The address of the master serving `mq` (the route is fetched again once if it has none)."""
    addr = (await instance.route(mq.topic)).masters.get(mq.broker_name)
    if addr is None:
        addr = (await instance.refresh_route(mq.topic)).masters.get(mq.broker_name)
    if addr is None:
        raise ClientError(f"broker {mq.broker_name} of {mq.topic} has no master now")
    return addr


async def pull_addr(instance: ClientInstance, mq: MessageQueue) -> str:
    """Where to pull `mq` from: the broker id its last pull suggested (suggestWhichBrokerId), else the
    master, else any broker of its group: a slave serves reads while its master is gone."""
    route = await instance.route(mq.topic)
    for _ in range(2):
        addr = _pull_addr_in(route, mq, instance.suggested_broker_ids.get(mq, 0))
        if addr is not None:
            return addr
        route = await instance.refresh_route(mq.topic)
    raise ClientError(f"broker {mq.broker_name} of {mq.topic} has no address now")


def known_pull_addr(instance: ClientInstance, mq: MessageQueue) -> str | None:
    """`pull_addr` from the cached route alone, without a coroutine (None: ask `pull_addr`)."""
    route = instance.routes.get(mq.topic)
    return _pull_addr_in(route, mq, instance.suggested_broker_ids.get(mq, 0)) if route is not None else None


def _pull_addr_in(route: TopicRoute, mq: MessageQueue, wanted: int) -> str | None:
    addrs = next((b.broker_addrs for b in route.data.broker_datas if b.broker_name == mq.broker_name), {})
    return addrs.get(wanted) or addrs.get(0) or (addrs[min(addrs)] if addrs else None)


async def initial_offset(
    instance: ClientInstance, addr: str, mq: MessageQueue, consume_from: str, timestamp: int
) -> int:
    """Where a group with no committed offset starts on `mq`: "first" (the queue's min offset),
    "timestamp" (the first message stored at or after `timestamp` ms) or "last" (the max offset;
    the broker already answers 0 for a new group while the queue still holds its first message)."""
    if consume_from == "first":
        return await queue_offset(instance, addr, mq, RequestCode.GET_MIN_OFFSET)
    if consume_from == "timestamp":
        return await queue_offset(
            instance, addr, mq, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp=str(timestamp)
        )
    return await queue_offset(instance, addr, mq, RequestCode.GET_MAX_OFFSET)
