"""Metrics and readiness of the NameServer, the controller and the gRPC proxy.

Each is small: how much a NameServer's route table holds; a controller's Raft standing, its
elections and each broker group's master epoch and SyncStateSet; that a proxy is up and how many
clients it has. Their remoting answer times come from ``remoting.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from ferrymq.metrics.node import Node
from ferrymq.metrics.spec import NODE, Spec, sample

if TYPE_CHECKING:
    from ferrymq.controller.server import Controller
    from ferrymq.namesrv.server import NameServer
    from ferrymq.proxy.server import ProxyServer

NAMESRV_SIZE = Spec(
    "ferrymq_namesrv_routes",
    "gauge",
    (*NODE, "kind"),
    "What the route table holds, by kind: clusters, broker_groups, live_brokers, topics.",
)
CONTROLLER_ROLE = Spec(
    "ferrymq_controller_is_leader",
    "gauge",
    NODE,
    "1 while this controller is the Raft leader and caught up, else 0.",
)
CONTROLLER_LEADER = Spec(
    "ferrymq_controller_leader_known",
    "gauge",
    NODE,
    "1 while this controller knows which node leads, else 0.",
)
ELECTIONS = Spec(
    "ferrymq_controller_elections_total",
    "counter",
    NODE,
    "Masters this controller elected while leading, since it started.",
)
_SET = (*NODE, "broker_name")
MASTER_EPOCH = Spec(
    "ferrymq_controller_master_epoch",
    "gauge",
    _SET,
    "The broker group's master epoch in the replicated state (one per election).",
)
SET_SIZE = Spec(
    "ferrymq_controller_sync_state_set_size",
    "gauge",
    _SET,
    "Members of the broker group's SyncStateSet in the replicated state.",
)
SET_EPOCH = Spec(
    "ferrymq_controller_sync_state_set_epoch",
    "gauge",
    _SET,
    "The broker group's SyncStateSet epoch (one per change).",
)
HAS_MASTER = Spec("ferrymq_controller_has_master", "gauge", _SET, "1 while the broker group has a master.")
ACTIVE_BROKERS = Spec(
    "ferrymq_controller_active_brokers",
    "gauge",
    _SET,
    "Brokers of the group whose heartbeats this controller receives.",
)
PROXY_UP = Spec("rocketmq_proxy_up", "gauge", NODE, "1 while the gRPC proxy serves.", "RocketMQ 5")
PROXY_CLIENTS = Spec(
    "ferrymq_proxy_clients", "gauge", NODE, "RocketMQ 5 clients the proxy knows (by client id)."
)
SPECS = (
    NAMESRV_SIZE,
    CONTROLLER_ROLE,
    CONTROLLER_LEADER,
    ELECTIONS,
    MASTER_EPOCH,
    SET_SIZE,
    SET_EPOCH,
    HAS_MASTER,
    ACTIVE_BROKERS,
    PROXY_UP,
    PROXY_CLIENTS,
)


class NamesrvCollector:
    def __init__(self, node: Node, namesrv: NameServer) -> None:
        self.node = node
        self.namesrv = namesrv

    def collect(self) -> Iterator[Metric]:
        family = NAMESRV_SIZE.family()
        for kind, count in self.namesrv.routes.sizes().items():
            sample(family, (*self.node, kind), count)
        yield family


class ControllerCollector:
    def __init__(self, node: Node, controller: Controller) -> None:
        self.node = node
        self.controller = controller

    def collect(self) -> Iterator[Metric]:
        controller, node = self.controller, self.node
        for spec, value in (
            (CONTROLLER_ROLE, int(controller.is_leader)),
            (CONTROLLER_LEADER, int(controller.leader_id() is not None)),
            (ELECTIONS, controller.elections),
        ):
            family = spec.family()
            sample(family, node, value)
            yield family
        families = [spec.family() for spec in (MASTER_EPOCH, SET_SIZE, SET_EPOCH, HAS_MASTER, ACTIVE_BROKERS)]
        if controller.raft is not None:
            alive = controller.alive
            with controller.raft.reading() as state:
                for name, found in state.sets.items():
                    labels = (found.cluster_name, node.node_type, node.node_id, name)
                    values = (
                        found.master_epoch,
                        len(found.sync_state_set),
                        found.sync_state_set_epoch,
                        int(found.master_id is not None),
                        sum(alive(name, i) for i in found.addresses),
                    )
                    for family, value in zip(families, values, strict=True):
                        sample(family, labels, value)
        yield from families


def controller_ready(controller: Controller) -> str | None:
    """A controller is ready once it knows who leads the Raft group (it may be itself)."""
    return None if controller.leader_id() is not None else "controller does not know a Raft leader yet"


class ProxyCollector:
    def __init__(self, node: Node, proxy: ProxyServer) -> None:
        self.node = node
        self.proxy = proxy

    def collect(self) -> Iterator[Metric]:
        up, clients = PROXY_UP.family(), PROXY_CLIENTS.family()
        sample(up, self.node, int(self.proxy.serving))
        sample(clients, self.node, len(self.proxy.clients))
        yield from (up, clients)


def proxy_ready(proxy: ProxyServer) -> str | None:
    return None if proxy.serving else "proxy not serving"
