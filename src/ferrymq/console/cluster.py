"""ClusterData: every read and action of the console, over the SDK's Admin and the metadata service.

The HTTP handlers never speak remoting themselves: they call this one object, so an admin call the
brokers learn later plugs in here and nowhere else. What Admin has no single call for is put
together from the request codes brokers answer today: the topic table (GET_ALL_TOPIC_CONFIG), every
committed offset (GET_ALL_CONSUMER_OFFSET) and queue ends (GET_MAX_OFFSET, asked once per queue and
kept for a few seconds, since a page of a thousand groups would otherwise ask a thousand times).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ferrymq.client import Admin, ClientError, Message, MessageExt, MessageQueue, Producer, SendResult
from ferrymq.client.dead_letters import TOOLS_GROUP
from ferrymq.client.pull import pull, queue_offset
from ferrymq.client.trace_view import MessageTrace, message_trace
from ferrymq.protocol.bodies import (
    ConsumerOffsetSerializeWrapper,
    KVTable,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
    decode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.protocol.trace import TRACE_TOPIC

T = TypeVar("T")

PRODUCER_GROUP = "FERRYMQ_CONSOLE_PRODUCER"  # the console's test messages come from this group
FRESH_S = 5.0  # how long a table read from the brokers serves later pages
_PARALLEL = 64  # requests in flight at once when a page needs one per queue


class Metadata(Protocol):
    """What the console reads of the metadata service (MetaClient over HTTP, or MetaService in
    process): RabbitMQ's definitions document."""

    async def export_definitions(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class GroupLag:
    """One group on one topic: committed offsets summed over queues, and how far behind it is."""

    group: str
    topic: str
    queues: int
    consumer_offset: int
    lag: int


class _Fresh:
    """A value computed at most once per FRESH_S; callers meanwhile share the computation in flight."""

    def __init__(self, compute: Callable[[], Awaitable[Any]]) -> None:
        self._compute = compute
        self._task: asyncio.Task | None = None
        self._at = 0.0

    async def get(self) -> Any:
        now = time.monotonic()
        if self._task is None or (self._task.done() and now - self._at > FRESH_S):
            self._at = now
            self._task = asyncio.ensure_future(self._compute())
        task = self._task
        try:
            return await asyncio.shield(task)
        except BaseException:
            if task.done() and self._task is task:
                self._task = None  # an error is not kept: the next page asks again
            raise

    def forget(self) -> None:
        self._task = None


async def _bounded(calls: Iterable[Awaitable[T]]) -> list[T]:
    """Await `calls` with at most _PARALLEL in flight; results in order."""
    gate = asyncio.Semaphore(_PARALLEL)

    async def one(call: Awaitable[T]) -> T:
        async with gate:
            return await call

    return await asyncio.gather(*(one(c) for c in calls))


class ClusterData:
    def __init__(
        self,
        namesrv: str,
        *,
        controllers: str | None = None,
        metadata: Metadata | None = None,
        trace_topic: str = TRACE_TOPIC,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        """`access_key`/`secret_key`: the user every request of the console is signed as, on a cluster
        with authentication on (the console has no login of its own: it acts as this user)."""
        self.namesrv = namesrv
        self.access_key = access_key
        self.controllers = controllers
        self.metadata = metadata
        self.trace_topic = trace_topic
        self.admin = Admin(namesrv, access_key=access_key, secret_key=secret_key)
        self._producer: Producer | None = None
        self._topics = _Fresh(self._read_topics)
        self._lags = _Fresh(self._read_lags)

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.shutdown()
        await self.admin.shutdown()

    async def _invoke(self, addr: str, code: int, ext: dict[str, str] | None = None) -> RemotingCommand:
        response = await self.admin.instance.invoke(addr, RemotingCommand(code, ext_fields=ext or {}))
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"broker {addr} refused request {code}: {response.remark}")
        return response

    async def masters(self) -> dict[str, str]:
        """broker name → master address, of every broker group that has a master now."""
        info = await self.admin.cluster_info()
        return {n: b.broker_addrs[0] for n, b in info.broker_addr_table.items() if 0 in b.broker_addrs}

    async def _per_master(self, code: int, read: Callable[[bytes], T]) -> dict[str, T]:
        """broker name → `read` of the master's answer to `code`."""
        masters = await self.masters()
        answers = await asyncio.gather(*(self._invoke(a, code) for a in masters.values()))
        return {name: read(bytes(r.body)) for name, r in zip(masters, answers, strict=True)}

    # --- cluster --------------------------------------------------------------------------------

    async def brokers(self) -> list[dict[str, Any]]:
        """Every broker group with its replicas, roles and (with controllers) epochs and SyncStateSet;
        each live replica with its runtime figures."""
        groups = await self.admin.broker_groups(self.controllers)
        out = []
        for g in groups:
            replicas = []
            for r in g.replicas:
                runtime = None if r.role == "gone" else await self.runtime(r.address)
                replicas.append({**r.__dict__, "runtime": runtime})
            out.append({**g.__dict__, "replicas": replicas})
        return out

    async def runtime(self, addr: str) -> dict[str, str] | None:
        """A broker's GET_BROKER_RUNTIME_INFO table (None when it does not answer)."""
        try:
            response = await self._invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
            return decode_body(KVTable, response.body).table
        except (ClientError, OSError, TimeoutError):
            return None

    async def totals(self) -> dict[str, int]:
        """Messages stored and delivered since each master started, summed over masters."""
        tables = [await self.runtime(a) for a in (await self.masters()).values()]
        known = [t for t in tables if t]
        return {
            "put": sum(int(t.get("msgPutTotalTodayNow", 0)) for t in known),
            "get": sum(int(t.get("msgGetTotalTodayNow", 0)) for t in known),
            "brokers": len(known),
        }

    async def auth_enabled(self) -> bool:
        """Whether the brokers check who sends each request (a master's `authEnabled` setting)."""
        for addr in (await self.masters()).values():
            return (await self.admin.broker_config(addr)).get("authEnabled") == "true"
        raise ClientError("no master broker is registered")

    # --- topics ---------------------------------------------------------------------------------

    async def topics(self) -> dict[str, dict[str, TopicConfig]]:
        """topic → broker name → its config there (cached for FRESH_S)."""
        result: dict[str, dict[str, TopicConfig]] = await self._topics.get()
        return result

    async def _read_topics(self) -> dict[str, dict[str, TopicConfig]]:
        tables = await self._per_master(
            RequestCode.GET_ALL_TOPIC_CONFIG,
            lambda body: decode_body(TopicConfigSerializeWrapper, body).topic_config_table,
        )
        topics: dict[str, dict[str, TopicConfig]] = {}
        for broker, table in tables.items():
            for name, config in table.items():
                topics.setdefault(name, {})[broker] = config
        return topics

    async def create_topic(self, topic: str, queues: int, *, order: bool, perm: int) -> None:
        await self.admin.create_topic(topic, queues, order=order, perm=perm)
        self._topics.forget()

    async def delete_topic(self, topic: str) -> None:
        await self.admin.delete_topic(topic)
        self._topics.forget()

    async def route(self, topic: str) -> dict[str, Any]:
        route = await self.admin.instance.existing_route(topic)
        if route is None:
            raise LookupError(f"topic {topic} has no route: it does not exist")
        return {
            "brokers": [{"name": b.broker_name, "cluster": b.cluster, "addrs": b.broker_addrs}
                        for b in route.data.broker_datas],
            "queues": [{"broker": q.broker_name, "read": q.read_queue_nums, "write": q.write_queue_nums,
                        "perm": q.perm} for q in route.data.queue_datas],
        }  # fmt: skip

    async def topic_status(self, topic: str) -> list[dict[str, Any]]:
        """Per read queue: its first and next offsets."""
        route = await self.admin.instance.existing_route(topic)
        if route is None:
            raise LookupError(f"topic {topic} does not exist")

        async def status(mq: MessageQueue) -> dict[str, Any]:
            addr = route.masters.get(mq.broker_name) or ""
            low = await queue_offset(self.admin.instance, addr, mq, RequestCode.GET_MIN_OFFSET)
            high = await queue_offset(self.admin.instance, addr, mq, RequestCode.GET_MAX_OFFSET)
            return {"broker": mq.broker_name, "queue": mq.queue_id, "min": low, "max": high}

        return await _bounded(status(mq) for mq in route.read_queues)

    async def send(self, topic: str, body: bytes, *, tags: str | None, keys: list[str]) -> SendResult:
        """Send one message as the console's producer group (started on first use)."""
        if self._producer is None:
            producer = Producer(PRODUCER_GROUP, self.namesrv, instance=self.admin.instance)
            await producer.start()
            self._producer = producer
        return await self._producer.send(Message(topic, body, tags=tags, keys=keys or None))

    # --- consumer groups ------------------------------------------------------------------------

    async def group_names(self) -> set[str]:
        """Every subscription group any master knows."""
        tables = await self._per_master(
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
            lambda body: decode_body(SubscriptionGroupWrapper, body).subscription_group_table,
        )
        return {name for table in tables.values() for name in table}

    async def lags(self) -> list[GroupLag]:
        """Every (group, topic) with a committed offset, and its lag (cached for FRESH_S)."""
        result: list[GroupLag] = await self._lags.get()
        return result

    async def _read_lags(self) -> list[GroupLag]:
        tables = await self._per_master(
            RequestCode.GET_ALL_CONSUMER_OFFSET,
            lambda body: decode_body(ConsumerOffsetSerializeWrapper, body).offset_table,
        )
        masters = await self.masters()
        committed: dict[tuple[str, str], dict[MessageQueue, int]] = {}
        for broker, table in tables.items():
            for key, offsets in table.items():
                topic, _, group = key.partition("@")
                mine = committed.setdefault((group, topic), {})
                for queue_id, offset in offsets.items():
                    mine[MessageQueue(topic=topic, broker_name=broker, queue_id=queue_id)] = offset
        queues = sorted({mq for offsets in committed.values() for mq in offsets}, key=str)
        ends = await _bounded(
            queue_offset(self.admin.instance, masters[mq.broker_name], mq, RequestCode.GET_MAX_OFFSET)
            for mq in queues
        )
        end_of = dict(zip(queues, ends, strict=True))
        return [
            GroupLag(group, topic, len(offsets), sum(offsets.values()),
                     sum(max(0, end_of[mq] - max(o, 0)) for mq, o in offsets.items()))
            for (group, topic), offsets in sorted(committed.items())
        ]  # fmt: skip

    def forget_lags(self) -> None:
        """After a reset: the next page reads offsets again."""
        self._lags.forget()

    # --- messages -------------------------------------------------------------------------------

    async def query_by_time(self, topic: str, begin: int, end: int, limit: int) -> list[MessageExt]:
        """Up to `limit` messages of `topic` stored between `begin` and `end` (ms), oldest first:
        each queue read from the first offset at or after `begin`, as a tool that commits nothing."""
        route = await self.admin.instance.existing_route(topic)
        if route is None:
            raise LookupError(f"topic {topic} does not exist")
        instance = self.admin.instance

        async def read(mq: MessageQueue) -> list[MessageExt]:
            addr = route.masters.get(mq.broker_name) or ""
            offset = await queue_offset(instance, addr, mq, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                        timestamp=str(begin))  # fmt: skip
            found: list[MessageExt] = []
            while len(found) < limit:
                result = await pull(instance, addr, mq, TOOLS_GROUP, offset, max_messages=32, suspend_ms=0)
                if not result.messages:
                    break
                found += [m for m in result.messages if begin <= m.store_timestamp <= end]
                if result.messages[-1].store_timestamp > end or result.next_begin_offset <= offset:
                    break
                offset = result.next_begin_offset
            return found

        found = [m for batch in await _bounded(read(mq) for mq in route.read_queues) for m in batch]
        return sorted(found, key=lambda m: m.store_timestamp)[:limit]

    async def trace(self, msg_id: str) -> MessageTrace:
        """The message's life from the trace topic; LookupError when there is no trace of it."""
        if await self.admin.instance.existing_route(self.trace_topic) is None:
            raise LookupError(f"no trace of {msg_id}: no trace topic {self.trace_topic} (tracing is off)")
        found = await message_trace(self.admin.instance, msg_id, self.trace_topic)
        if not found.found:
            raise LookupError(f"no trace of message {msg_id} in {self.trace_topic} (not written yet?)")
        return found

    # --- AMQP -----------------------------------------------------------------------------------

    async def definitions(self) -> dict[str, Any] | None:
        """The metadata service's definitions (vhosts, users, exchanges, queues, bindings, policies);
        None when the console was given no metadata service."""
        return None if self.metadata is None else await self.metadata.export_definitions()
