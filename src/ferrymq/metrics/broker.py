"""A broker's metrics: RocketMQ 5's native names, rocketmq-exporter's names, store and replication.

Everything is read when Prometheus scrapes: message counts from the put, read and pop services'
tallies, positions from the ConsumeQueues and the offset table, the rest from the store and the HA
service. One scrape walks every (group, topic, queue) with an offset once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from ferrymq import __version__
from ferrymq.metrics.node import Node
from ferrymq.metrics.spec import NODE, Spec, sample

if TYPE_CHECKING:
    from ferrymq.broker.server import Broker

_R5, _EXP = "RocketMQ 5", "rocketmq-exporter"
_TG = (*NODE, "topic", "consumer_group")
MESSAGES_IN = Spec(
    "rocketmq_messages_in_total",
    "counter",
    (*NODE, "topic"),
    "Messages stored for producers, by topic, since the broker started.",
    _R5,
)
THROUGHPUT_IN = Spec(
    "rocketmq_throughput_in_total",
    "counter",
    (*NODE, "topic"),
    "Bytes stored for producers (whole records), by topic, since the broker started.",
    _R5,
)
MESSAGES_OUT = Spec(
    "rocketmq_messages_out_total",
    "counter",
    _TG,
    "Messages delivered to consumers by pull and pop, since the broker started.",
    _R5,
)
THROUGHPUT_OUT = Spec(
    "rocketmq_throughput_out_total",
    "counter",
    _TG,
    "Bytes delivered to consumers by pull and pop, since the broker started.",
    _R5,
)
LAG = Spec(
    "rocketmq_consumer_lag_messages",
    "gauge",
    _TG,
    "Messages not consumed yet: queue ends minus the group's committed offsets, plus messages "
    "popped and not acknowledged.",
    _R5,
)
INFLIGHT = Spec(
    "rocketmq_consumer_inflight_messages",
    "gauge",
    _TG,
    "Messages delivered but not committed: pulled past the committed offset, or popped and not acknowledged.",
    _R5,
)
READY = Spec(
    "rocketmq_consumer_ready_messages",
    "gauge",
    _TG,
    "Messages not delivered yet: queue ends minus how far the group pulled.",
    _R5,
)
PRODUCER_CONNECTIONS = Spec(
    "rocketmq_producer_connections", "gauge", NODE, "Producer clients registered by heartbeat.", _R5
)
CONSUMER_CONNECTIONS = Spec(
    "rocketmq_consumer_connections",
    "gauge",
    (*NODE, "consumer_group"),
    "Consumer clients registered by heartbeat, by group.",
    _R5,
)
WATERMARK = Spec(
    "rocketmq_processor_watermark",
    "gauge",
    (*NODE, "processor"),
    "Work waiting: 'remoting' counts request handlers running, 'pull_hold' pulls held by long polling.",
    _R5,
)
PERMISSION = Spec(
    "rocketmq_broker_permission",
    "gauge",
    NODE,
    "The broker's permission bits (2 write, 4 read, 6 both).",
    _R5,
)

_RT = ("cluster", "brokerIP", "brokerHost", "des", "boottime", "broker_version")
RT_PUT = Spec(
    "rocketmq_brokeruntime_msg_put_total_today_now",
    "gauge",
    _RT,
    "Messages stored since the broker started (the exporter's 'today').",
    _EXP,
)
RT_GET = Spec(
    "rocketmq_brokeruntime_msg_gettotal_today_now",
    "gauge",
    _RT,
    "Messages delivered since the broker started (the exporter's 'today').",
    _EXP,
)
RT_DISK = Spec(
    "rocketmq_brokeruntime_commitlog_disk_ratio",
    "gauge",
    _RT,
    "Used share (0-1) of the file system holding the store.",
    _EXP,
)
RT_MAX = Spec(
    "rocketmq_brokeruntime_commitlog_maxoffset", "gauge", _RT, "The CommitLog's end offset in bytes.", _EXP
)
RT_DISPATCH = Spec(
    "rocketmq_brokeruntime_dispatch_behind_bytes",
    "gauge",
    _RT,
    "CommitLog bytes not yet dispatched into ConsumeQueues.",
    _EXP,
)
RT_FLUSH = Spec(
    "rocketmq_brokeruntime_remain_howmanydata_toflush",
    "gauge",
    _RT,
    "CommitLog bytes written but not yet flushed to disk (flush lag).",
    _EXP,
)
PRODUCER_OFFSET = Spec(
    "rocketmq_producer_offset",
    "gauge",
    ("cluster", "broker", "topic"),
    "Sum of the topic's queue end offsets on this broker.",
    _EXP,
)
CONSUMER_OFFSET = Spec(
    "rocketmq_consumer_offset",
    "gauge",
    ("cluster", "broker", "topic", "group"),
    "Sum of the group's committed offsets of the topic's queues on this broker.",
    _EXP,
)
GROUP_DIFF = Spec(
    "rocketmq_group_diff",
    "gauge",
    ("group", "topic", "countOfOnlineConsumers", "msgModel"),
    "The group's lag on the topic on this broker (as rocketmq_consumer_lag_messages).",
    _EXP,
)

SPECS = (
    MESSAGES_IN,
    THROUGHPUT_IN,
    MESSAGES_OUT,
    THROUGHPUT_OUT,
    LAG,
    INFLIGHT,
    READY,
    PRODUCER_CONNECTIONS,
    CONSUMER_CONNECTIONS,
    WATERMARK,
    PERMISSION,
    RT_PUT,
    RT_GET,
    RT_DISK,
    RT_MAX,
    RT_DISPATCH,
    RT_FLUSH,
    PRODUCER_OFFSET,
    CONSUMER_OFFSET,
    GROUP_DIFF,
)


@dataclass
class Position:
    """One group's standing on one topic of this broker, summed over its queues."""

    committed: int = 0
    lag: int = 0
    inflight: int = 0
    ready: int = 0


@dataclass
class Snapshot:
    """What one scrape reads of a broker, computed once for every family that shows it."""

    positions: dict[tuple[str, str], Position] = field(default_factory=dict)  # (topic, group) →
    topic_ends: dict[str, int] = field(default_factory=dict)
    delivered: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # → [messages, bytes]


def snapshot(broker: Broker) -> Snapshot:
    store, pulled = broker.store, broker.reads.pulled
    snap = Snapshot()
    for cq in store.queues.all():
        snap.topic_ends[cq.topic] = snap.topic_ends.get(cq.topic, 0) + cq.max_offset
    for key, queues in list(broker.offsets.table.items()):
        topic, _, group = key.partition("@")
        pos = snap.positions.setdefault((topic, group), Position())
        for queue_id, committed in list(queues.items()):
            end = store.get_max_offset(topic, queue_id)
            reached = min(max(pulled.get((topic, group, queue_id), committed), committed), end)
            pos.committed += committed
            pos.lag += max(0, end - committed)
            pos.inflight += max(0, reached - committed)
            pos.ready += max(0, end - reached)
    for (topic, group), popped in broker.pops.table.in_flight().items():
        pos = snap.positions.setdefault((topic, group), Position())
        pos.lag += popped
        pos.inflight += popped
    for tally in (broker.reads.delivered, broker.pops.delivered):
        for pair, count, size in tally.items():
            total = snap.delivered.setdefault(pair, [0, 0])
            total[0] += count
            total[1] += size
    return snap


class BrokerCollector:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    @property
    def node(self) -> Node:
        config = self.broker.config
        return Node(config.broker_cluster_name, "broker", config.broker_name)

    def collect(self) -> Iterator[Metric]:
        broker, node = self.broker, self.node
        snap = snapshot(broker)
        yield from self._traffic(node, snap)
        yield from self._consumers(node, snap)
        yield from self._runtime(snap)
        yield from self._exporter(snap)

    def _traffic(self, node: Node, snap: Snapshot) -> Iterator[Metric]:
        broker = self.broker
        fams = [spec.family() for spec in (MESSAGES_IN, THROUGHPUT_IN, MESSAGES_OUT, THROUGHPUT_OUT)]
        for topic, count, size in broker.puts.stored.items():
            sample(fams[0], (*node, topic), count)
            sample(fams[1], (*node, topic), size)
        for (topic, group), (count, size) in snap.delivered.items():
            sample(fams[2], (*node, topic, group), count)
            sample(fams[3], (*node, topic, group), size)
        yield from fams
        producers, consumers = PRODUCER_CONNECTIONS.family(), CONSUMER_CONNECTIONS.family()
        clients = broker.clients
        sample(producers, node, sum(len(members) for members in list(clients.producers.values())))
        for name, members in list(clients.consumers.items()):
            sample(consumers, (*node, name), len(members.members))
        watermark, permission = WATERMARK.family(), PERMISSION.family()
        running = sum(len(conn.handler_tasks) for conn in broker.server.connections)
        sample(watermark, (*node, "remoting"), running)
        sample(watermark, (*node, "pull_hold"), broker.hold.waiting())
        sample(permission, node, broker.config.broker_permission)
        yield from (producers, consumers, watermark, permission)

    def _consumers(self, node: Node, snap: Snapshot) -> Iterator[Metric]:
        lag, inflight, ready = LAG.family(), INFLIGHT.family(), READY.family()
        for (topic, group), pos in snap.positions.items():
            labels = (*node, topic, group)
            sample(lag, labels, pos.lag)
            sample(inflight, labels, pos.inflight)
            sample(ready, labels, pos.ready)
        yield from (lag, inflight, ready)

    def _runtime(self, snap: Snapshot) -> Iterator[Metric]:
        broker = self.broker
        config, store = broker.config, broker.store
        labels = (
            config.broker_cluster_name,
            config.broker_addr,
            config.broker_name,
            "",
            str(int(broker.started_at * 1000)),
            f"ferrymq {__version__}",
        )
        end = store.commitlog.max_offset
        values = (
            (RT_PUT, sum(n for _, n, _ in broker.puts.stored.items())),
            (RT_GET, sum(count for count, _ in snap.delivered.values())),
            (RT_DISK, store.disk_usage_ratio() / 100),
            (RT_MAX, end),
            (RT_DISPATCH, max(0, end - store.dispatcher.offset)),
            (RT_FLUSH, max(0, end - store.commitlog.flushed_offset)),
        )
        for spec, value in values:
            family = spec.family()
            sample(family, labels, value)
            yield family

    def _exporter(self, snap: Snapshot) -> Iterator[Metric]:
        broker = self.broker
        cluster, name = broker.config.broker_cluster_name, broker.config.broker_name
        produced, consumed, diff = PRODUCER_OFFSET.family(), CONSUMER_OFFSET.family(), GROUP_DIFF.family()
        for topic, end in snap.topic_ends.items():
            sample(produced, (cluster, name, topic), end)
        consumers = broker.clients.consumers
        for (topic, group), pos in snap.positions.items():
            sample(consumed, (cluster, name, topic, group), pos.committed)
            online = consumers.get(group)
            members = len(online.members) if online is not None else 0
            model = (online.message_model if online is not None else None) or "CLUSTERING"
            sample(diff, (group, topic, members, model), pos.lag)
        yield from (produced, consumed, diff)


def broker_ready(broker: Broker) -> str | None:
    """Ready once recovered, listening and registered with a NameServer; a slave also once it has
    caught up with its master (it holds what the master says its in-sync replicas hold)."""
    if broker.stopped:
        return "broker stopping"
    registrar = getattr(broker, "registrar", None)
    if registrar is None:
        return "broker starting"
    if broker.config.namesrv_addrs and not registrar.registered:
        return "broker not registered with any NameServer yet"
    if broker.is_master:
        return None
    ha = broker.ha_client
    if ha is None or not ha.connected or not ha.heard_master:
        return "slave not replicating from a master"
    behind = ha.confirm_offset - broker.store.commitlog.max_offset
    return f"slave {behind} bytes behind its master" if behind > 0 else None
