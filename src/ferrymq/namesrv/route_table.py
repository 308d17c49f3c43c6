"""RouteTable: which brokers are alive, and which topics each of them serves.

The NameServer's whole state, in the shape of RocketMQ's ``RouteInfoManager``. It is soft state:
brokers re-register every 30 s with every NameServer, so a restarted (or an additional) NameServer
converges by itself and NameServers never talk to each other. Pure bookkeeping with no I/O and an
injectable clock, so that expiry is tested without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from msgspec import structs

from ferrymq.protocol.bodies import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from ferrymq.protocol.headers import RegisterBrokerRequestHeader

MASTER_ID = 0
PERM_WRITE = 2

BrokerKey = tuple[str, str]
"""(cluster name, broker address): how a registered broker is known."""


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update: float  # clock() of the last registration or heartbeat
    timeout: float  # seconds of silence after which the broker is dropped
    data_version: DataVersion  # of the topic table it last sent
    ha_server_addr: str
    channel: object  # the connection it registered over: when that closes, the broker is gone


@dataclass(frozen=True, slots=True)
class RegisterResult:
    """For a slave: where its master is, and where the master's HA service listens."""

    master_addr: str | None = None
    ha_server_addr: str | None = None


class RouteTable:
    def __init__(self, broker_timeout: float = 120.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.broker_timeout = broker_timeout
        self._clock = clock
        self._topics: dict[str, dict[str, QueueData]] = {}  # topic → broker name → its queues
        self._brokers: dict[str, BrokerData] = {}  # broker name → the addresses of its members
        self._clusters: dict[str, set[str]] = {}  # cluster name → broker names
        self._live: dict[BrokerKey, BrokerLiveInfo] = {}

    # --- what brokers tell us ------------------------------------------------------------------

    def sizes(self) -> dict[str, int]:
        """How much the table holds (for metrics): clusters, broker groups, live brokers, topics."""
        return {
            "clusters": len(self._clusters),
            "broker_groups": len(self._brokers),
            "live_brokers": len(self._live),
            "topics": len(self._topics),
        }

    def register_broker(
        self,
        header: RegisterBrokerRequestHeader,
        topics: TopicConfigSerializeWrapper,
        channel: object,
    ) -> RegisterResult:
        """Record a broker's (re-)registration; a master's topics become routes (and those of the
        slave standing in for a missing master, when the group allows it)."""
        cluster, addr, name = header.cluster_name, header.broker_addr, header.broker_name
        broker_id = header.broker_id
        self._clusters.setdefault(cluster, set()).add(name)
        broker = self._brokers.get(name)
        if broker is None:
            broker = self._brokers[name] = BrokerData(broker_name=name, cluster=cluster, broker_addrs={})
        broker.enable_acting_master = bool(header.enable_acting_master)
        # An address back under another id (a slave promoted to master) gives up its old id.
        broker.broker_addrs = {i: a for i, a in broker.broker_addrs.items() if a != addr or i == broker_id}
        first = broker_id not in broker.broker_addrs
        broker.broker_addrs[broker_id] = addr

        key = (cluster, addr)
        if broker_id == MASTER_ID:
            previous = self._live.get(key)
            changed = first or previous is None or previous.data_version != topics.data_version
            for config in topics.topic_config_table.values():
                # Unchanged topics are left alone: a write permission wiped by an admin stays wiped.
                if changed or name not in self._topics.get(config.topic_name, {}):
                    self._topics.setdefault(config.topic_name, {})[name] = _queue_data(name, config)
            if changed:
                self._forget_deleted_topics(name, topics.topic_config_table)
        elif (
            broker.enable_acting_master
            and MASTER_ID not in broker.broker_addrs
            and broker_id == min(broker.broker_addrs)
        ):  # RocketMQ 5's prime slave: its copy of the topics keeps a group whose every broker was
            # gone (a restarted acting slave) in the routes while its master is away, read-only
            for config in topics.topic_config_table.values():
                self._topics.setdefault(config.topic_name, {}).setdefault(name, _queue_data(name, config))
        timeout = (
            header.heartbeat_timeout_millis / 1000 if header.heartbeat_timeout_millis else self.broker_timeout
        )
        self._live[key] = BrokerLiveInfo(
            self._clock(), timeout, topics.data_version, header.ha_server_addr, channel
        )

        master_addr = broker.broker_addrs.get(MASTER_ID)
        master = self._live.get((cluster, master_addr)) if master_addr else None
        if broker_id != MASTER_ID and master is not None:
            return RegisterResult(master_addr, master.ha_server_addr)
        return RegisterResult()

    def _forget_deleted_topics(self, name: str, kept: dict[str, TopicConfig]) -> None:
        """A master's registration lists every topic it has: one it no longer lists was deleted on it
        (a topic moved to other broker groups), so its queues there leave the route."""
        for topic in [t for t, queues in self._topics.items() if name in queues and t not in kept]:
            queues = self._topics[topic]
            del queues[name]
            if not queues:
                del self._topics[topic]

    def unregister_broker(self, cluster: str, addr: str, name: str) -> None:
        """A broker shutting down says goodbye (UNREGISTER_BROKER)."""
        self._remove((cluster, addr), name)

    def heartbeat(self, cluster: str, addr: str) -> None:
        """A registered broker is still alive (BROKER_HEARTBEAT, QUERY_DATA_VERSION)."""
        live = self._live.get((cluster, addr))
        if live is not None:
            live.last_update = self._clock()

    def data_version(self, cluster: str, addr: str) -> DataVersion | None:
        """The version of the topic table this broker last registered, None if it is not registered."""
        live = self._live.get((cluster, addr))
        return live.data_version if live is not None else None

    def remove_channel(self, channel: object) -> list[BrokerKey]:
        """Forget the brokers that registered over ``channel``, which has closed."""
        gone = [key for key, live in self._live.items() if live.channel is channel]
        for key in gone:
            self._remove(key)
        return gone

    def remove_expired(self) -> list[tuple[BrokerKey, object]]:
        """Forget the brokers silent for longer than their timeout; return them with their channels."""
        now = self._clock()
        expired = [
            (key, live.channel) for key, live in self._live.items() if now - live.last_update > live.timeout
        ]
        for key, _ in expired:
            self._remove(key)
        return expired

    # --- what clients and admin tools ask ----------------------------------------------------

    def topic_route(self, topic: str) -> TopicRouteData | None:
        """Every broker serving ``topic`` and its queues there; None for a topic nobody serves."""
        queues = self._topics.get(topic, {})
        brokers = [_copy_broker(self._brokers[name]) for name in sorted(queues) if name in self._brokers]
        if not brokers:
            return None
        queue_datas = {name: structs.replace(queues[name]) for name in sorted(queues)}
        for broker in brokers:  # RocketMQ 5's acting master: the lowest slave stands in, read-only
            addrs = broker.broker_addrs
            if broker.enable_acting_master and addrs and MASTER_ID not in addrs:
                broker.broker_addrs = {MASTER_ID: addrs[min(addrs)], **addrs}
                queue_datas[broker.broker_name].perm &= ~PERM_WRITE
        return TopicRouteData(queue_datas=list(queue_datas.values()), broker_datas=brokers)

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            broker_addr_table={name: _copy_broker(broker) for name, broker in sorted(self._brokers.items())},
            cluster_addr_table={cluster: sorted(names) for cluster, names in sorted(self._clusters.items())},
        )

    def topics(self, cluster: str | None = None) -> list[str]:
        """All topics, or those with queues on a broker of ``cluster``."""
        if cluster is None:
            return sorted(self._topics)
        names = self._clusters.get(cluster, set())
        return sorted(topic for topic, queues in self._topics.items() if not names.isdisjoint(queues))

    def system_topics(self) -> tuple[list[str], str | None]:
        """RocketMQ's system topic list: every cluster and broker name (each is a topic on its
        brokers), and one broker's address to ask for the brokers' own system topics."""
        names = set(self._clusters) | {name for names in self._clusters.values() for name in names}
        addr = next((addr for b in self._brokers.values() for addr in b.broker_addrs.values()), None)
        return sorted(names), addr

    # --- admin changes -----------------------------------------------------------------------

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        """Forget the topic's routes, everywhere or only on the brokers of ``cluster``."""
        if cluster is None:
            self._topics.pop(topic, None)
            return
        queues = self._topics.get(topic, {})
        for name in self._clusters.get(cluster, ()):
            queues.pop(name, None)
        if not queues:
            self._topics.pop(topic, None)

    def wipe_write_perm(self, broker_name: str) -> int:
        """Make the broker's queues read-only for producers (before it is taken down); return how many."""
        return self._change_perm(broker_name, lambda perm: perm & ~PERM_WRITE)

    def add_write_perm(self, broker_name: str) -> int:
        """Undo ``wipe_write_perm``; return how many topics changed."""
        return self._change_perm(broker_name, lambda perm: perm | PERM_WRITE)

    # --- internals ---------------------------------------------------------------------------

    def _change_perm(self, broker_name: str, change: Callable[[int], int]) -> int:
        count = 0
        for queues in self._topics.values():
            queue = queues.get(broker_name)
            if queue is not None:
                queue.perm = change(queue.perm)
                count += 1
        return count

    def _remove(self, key: BrokerKey, name: str | None = None) -> None:
        """Forget one broker address; when it was the last of its broker name, that name's routes too."""
        cluster, addr = key
        self._live.pop(key, None)
        for broker_name in [name] if name is not None else list(self._clusters.get(cluster, ())):
            broker = self._brokers.get(broker_name)
            if broker is None or addr not in broker.broker_addrs.values():
                continue
            broker.broker_addrs = {i: a for i, a in broker.broker_addrs.items() if a != addr}
            if not broker.broker_addrs:  # while a slave is left, it keeps serving reads of the topics
                del self._brokers[broker_name]
                self._forget_broker_name(cluster, broker_name)
            return

    def _forget_broker_name(self, cluster: str, name: str) -> None:
        names = self._clusters.get(cluster)
        if names is not None:
            names.discard(name)
            if not names:
                del self._clusters[cluster]
        for topic in [topic for topic, queues in self._topics.items() if name in queues]:
            del self._topics[topic][name]
            if not self._topics[topic]:
                del self._topics[topic]


def _queue_data(broker_name: str, config: TopicConfig) -> QueueData:
    return QueueData(
        broker_name=broker_name,
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=config.perm,
        topic_sys_flag=config.topic_sys_flag,
    )


def _copy_broker(broker: BrokerData) -> BrokerData:
    """A copy whose address map the table may change afterwards without touching it."""
    return structs.replace(broker, broker_addrs=dict(sorted(broker.broker_addrs.items())))
