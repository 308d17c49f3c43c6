"""A broker's replication metrics: its role and epoch, and how far replicas are behind.

A master reports the SyncStateSet it keeps and each connected replica's lag (its CommitLog end
minus the replica's last acknowledged offset); a slave reports whether it is connected and how far
it is behind the offset its master says the in-sync replicas hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from ferrymq.ha.qos import STATE_RANK
from ferrymq.metrics.node import Node
from ferrymq.metrics.spec import NODE, Spec, sample

if TYPE_CHECKING:
    from ferrymq.broker.server import Broker

IS_MASTER = Spec(
    "ferrymq_broker_is_master", "gauge", NODE, "1 while the broker is its group's master, else 0."
)
EPOCH = Spec("ferrymq_ha_master_epoch", "gauge", NODE, "The master epoch this broker last heard of.")
SYNC_STATE_SET = Spec(
    "ferrymq_ha_sync_state_set_size",
    "gauge",
    NODE,
    "Brokers in the master's SyncStateSet, itself included (masters only).",
)
REPLICA_LAG = Spec(
    "ferrymq_ha_replica_lag_bytes",
    "gauge",
    (*NODE, "replica_id"),
    "CommitLog bytes a connected replica has not acknowledged yet (masters only).",
)
SLAVE_CONNECTED = Spec(
    "ferrymq_ha_slave_connected",
    "gauge",
    NODE,
    "1 while a slave is connected to its master and copying, else 0 (slaves only).",
)
SLAVE_BEHIND = Spec(
    "ferrymq_ha_slave_behind_bytes",
    "gauge",
    NODE,
    "Bytes a slave lacks of what its master says the in-sync replicas hold (slaves only).",
)
QOS_STATE = Spec(
    "ferrymq_ha_replication_qos_state",
    "gauge",
    NODE,
    "The group's replication QoS state: 0 single master, 1 async, 2 semi-sync, 3 sync (masters with "
    "replication_qos_level set only).",
)
SPECS = (IS_MASTER, EPOCH, SYNC_STATE_SET, REPLICA_LAG, SLAVE_CONNECTED, SLAVE_BEHIND, QOS_STATE)


class ReplicationCollector:
    def __init__(self, node: Node, broker: Broker) -> None:
        self.node = node
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        broker, node = self.broker, self.node
        for spec, value in ((IS_MASTER, int(broker.is_master)), (EPOCH, broker.epoch)):
            family = spec.family()
            sample(family, node, value)
            yield family
        if broker.is_master:
            ha = broker.ha
            size, lag = SYNC_STATE_SET.family(), REPLICA_LAG.family()
            sample(size, node, len(ha.sync_state_set))
            end = broker.store.commitlog.max_offset
            for replica_id in list(ha.connections):
                acked = ha.tracker.acked_offset(replica_id)
                sample(lag, (*node, replica_id), max(0, end - acked) if acked >= 0 else end)
            yield from (size, lag)
            if ha.qos is not None:
                state = QOS_STATE.family()
                sample(state, node, STATE_RANK[ha.qos.state])
                yield state
            return
        client = broker.ha_client
        connected, behind = SLAVE_CONNECTED.family(), SLAVE_BEHIND.family()
        live = client is not None and client.connected
        sample(connected, node, int(live))
        if client is not None and client.heard_master:
            sample(behind, node, max(0, client.confirm_offset - broker.store.commitlog.max_offset))
        yield from (connected, behind)
