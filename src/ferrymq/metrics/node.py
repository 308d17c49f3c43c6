"""Which node a sample comes from, as RocketMQ 5 labels it (cluster, node_type, node_id)."""

from __future__ import annotations

from typing import NamedTuple


class Node(NamedTuple):
    cluster: str
    node_type: str  # broker, namesrv, controller, proxy (RocketMQ's values where it has them)
    node_id: str  # the broker name, or host:port of the others
