"""ClusterData: every read and action of the console, over the SDK's Admin and the metadata service.

The HTTP handlers never speak remoting themselves: they call this one object, so an admin call the
brokers learn later plugs in here and nowhere else. Group lag comes from GET_CONSUME_STATS (Admin's
consume stats), queue status from GET_TOPIC_STATS_INFO, rates from GET_BROKER_RUNTIME_INFO; the
whole topic table (GET_ALL_TOPIC_CONFIG) and every group's lag are kept for a few seconds, since a
page of a thousand groups would otherwise ask a thousand times. What Admin has no call for (deleting
a subscription group) is one request code here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ferrymq.client import Admin, ClientError, Message, MessageExt, MessageQueue, Producer, SendResult
from ferrymq.client.admin_stats import AdminRefused
from ferrymq.client.dead_letters import TOOLS_GROUP
from ferrymq.client.pull import pull, queue_offset
from ferrymq.client.trace_view import MessageTrace, message_trace
from ferrymq.protocol.bodies import (
    ClientConnection,
    SubscriptionGroupConfig,
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
PROBE_TIMEOUT_S = 2.0  # a proxy that takes longer to accept a connection counts as down
SECRET_WORDS = ("password", "secret")  # broker settings whose values the console never shows


class Metadata(Protocol):
    """What the console reads of the metadata service (MetaClient over HTTP, or MetaService in
    process): RabbitMQ's definitions document."""

    async def export_definitions(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class GroupLag:
    """One group on one topic: consumer offsets summed over its read queues, and how far behind it is."""

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
        proxies: str | None = None,
    ) -> None:
        """`access_key`/`secret_key`: the user every request of the console is signed as, on a cluster
        with authentication on (the console has no login of its own: it acts as this user).
        `proxies`: the gRPC proxies' host:port, ';'-separated (they register with no NameServer, so
        the console is told of them, as rocketmq-dashboard is)."""
        self.namesrv = namesrv
        self.proxies = [a.strip() for a in (proxies or "").split(";") if a.strip()]
        self.access_key = access_key
        self.controllers = controllers
        self.metadata = metadata
        self.trace_topic = trace_topic
        self.admin = Admin(namesrv, access_key=access_key, secret_key=secret_key)
        self._producer: Producer | None = None
        self._topics = _Fresh(self._read_topics)
        self._lags = _Fresh(self._read_lags)

    async def proxy_states(self) -> list[dict[str, Any]]:
        """Each proxy given: whether it takes connections now, and how long connecting took."""

        async def probe(address: str) -> dict[str, Any]:
            host, _, port = address.rpartition(":")
            started = time.monotonic()
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), PROBE_TIMEOUT_S)
            except (OSError, ValueError, TimeoutError) as e:
                return {"address": address, "up": False, "error": str(e) or type(e).__name__}
            writer.close()
            return {
                "address": address,
                "up": True,
                "connect_ms": round((time.monotonic() - started) * 1000, 1),
            }

        return list(await asyncio.gather(*(probe(a) for a in self.proxies)))

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
            return await self.admin.broker_runtime(addr)
        except (ClientError, OSError, TimeoutError):
            return None

    async def totals(self) -> dict[str, float]:
        """Summed over masters: messages stored and delivered since each started, and the rates
        each measures over its last 10 seconds (runtime info's putTps and getTransferedTps)."""
        tables = await asyncio.gather(*(self.runtime(a) for a in (await self.masters()).values()))
        known = [t for t in tables if t]
        return {
            "put": sum(int(t.get("msgPutTotalTodayNow", 0)) for t in known),
            "get": sum(int(t.get("msgGetTotalTodayNow", 0)) for t in known),
            "inTps": sum(_first_rate(t.get("putTps")) for t in known),
            "outTps": sum(_first_rate(t.get("getTransferedTps")) for t in known),
            "brokers": len(known),
        }

    async def broker_settings(self, addr: str) -> dict[str, str]:
        """A broker's GET_BROKER_CONFIG settings, passwords and secret keys blanked out."""
        if addr not in {a for g in (await self.admin.cluster_info()).broker_addr_table.values()
                        for a in g.broker_addrs.values()}:  # fmt: skip
            raise LookupError(f"no broker at {addr} in this cluster")
        settings = await self.admin.broker_config(addr)
        return {k: "******" if v and any(w in k.lower() for w in SECRET_WORDS) else v
                for k, v in sorted(settings.items())}  # fmt: skip

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
        """Create `topic`, or change its queues and permission when it exists."""
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
        """Per queue: its first and next offsets and when its last message was stored."""
        try:
            stats = await self.admin.topic_stats(topic)
        except AdminRefused as e:
            if e.code == ResponseCode.TOPIC_NOT_EXIST:
                raise LookupError(f"topic {topic} does not exist") from None
            raise
        return [{"broker": mq.broker_name, "queue": mq.queue_id, "min": o.min_offset, "max": o.max_offset,
                 "lastStored": o.last_update_timestamp} for mq, o in stats.items()]  # fmt: skip

    async def producers(self, group: str) -> list[ClientConnection]:
        """The producers of `group` connected to any master (none when it is not online)."""
        try:
            return (await self.admin.producer_connections(group)).connection_set
        except AdminRefused:
            return []

    async def consumers(self, group: str) -> dict[str, Any]:
        """The members of `group` connected to any master and what they subscribe (none online: empty)."""
        try:
            found = await self.admin.consumer_connections(group)
        except AdminRefused:
            return {"connections": [], "subscriptions": {}}
        return {
            "connections": found.connection_set,
            "subscriptions": {t: s.sub_string for t, s in found.subscription_table.items()},
            "consumeType": found.consume_type, "messageModel": found.message_model,
        }  # fmt: skip

    async def topic_consumers(self, topic: str) -> list[dict[str, Any]]:
        """The online groups subscribed to `topic`, each with its connected members."""
        online = []
        for group in await self.admin.topic_consumed_by(topic):
            found = await self.consumers(group)
            if topic in found["subscriptions"]:
                online.append({"group": group, "connections": found["connections"]})
        return online

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
        """Every (group, topic) the brokers report consume stats for, and its lag (cached for FRESH_S)."""
        result: list[GroupLag] = await self._lags.get()
        return result

    async def _read_lags(self) -> list[GroupLag]:
        lags = []
        for group, stats in sorted((await self.admin.all_consume_stats()).items()):
            by_topic: dict[str, list[tuple[int, int]]] = {}
            for mq, o in stats.offsets.items():
                by_topic.setdefault(mq.topic, []).append((o.broker_offset, o.consumer_offset))
            lags += [
                GroupLag(group, topic, len(queues), sum(c for _, c in queues),
                         sum(max(0, b - max(c, 0)) for b, c in queues))
                for topic, queues in sorted(by_topic.items())
            ]  # fmt: skip
        return lags

    async def progress(self, group: str) -> dict[str, list[dict[str, Any]]]:
        """topic → per queue: broker offset, consumer offset, lag and when the last consumed message
        was stored (GET_CONSUME_STATS); empty when no broker knows the group."""
        try:
            stats = await self.admin.consume_stats(group)
        except AdminRefused:
            return {}
        progress: dict[str, list[dict[str, Any]]] = {}
        for mq, o in stats.offsets.items():
            progress.setdefault(mq.topic, []).append({
                "broker": mq.broker_name, "queue": mq.queue_id, "brokerOffset": o.broker_offset,
                "consumerOffset": o.consumer_offset,
                "lag": max(0, o.broker_offset - max(o.consumer_offset, 0)),
                "lastConsumed": o.last_timestamp,
            })  # fmt: skip
        return progress

    async def create_group(self, config: SubscriptionGroupConfig) -> None:
        """Create (or update) a subscription group on every master."""
        await self.admin.create_groups([config])
        self._lags.forget()

    async def delete_group(self, group: str, *, clean_offsets: bool) -> None:
        """Delete `group`'s subscription config (and, when asked, its offsets) on every master."""
        masters = list((await self.masters()).values())
        await self.admin.delete_group(group, masters, clean_offset=clean_offsets)
        self._lags.forget()

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


def _first_rate(rates: str | None) -> float:
    """The 10-second figure of a runtime-info rate ("12.00 10.50 9.98"); 0 when absent."""
    try:
        return float((rates or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0
