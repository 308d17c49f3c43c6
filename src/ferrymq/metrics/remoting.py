"""rocketmq_rpc_latency: the remoting server's answer times, from its plain-int bucket counts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import HistogramMetricFamily, Metric

from ferrymq.metrics.node import Node
from ferrymq.metrics.spec import NODE, Spec
from ferrymq.net.latency import BOUNDS_MS

if TYPE_CHECKING:
    from ferrymq.net import RemotingServer

RPC_LATENCY = Spec(
    "rocketmq_rpc_latency",
    "histogram",
    (*NODE, "protocol_type", "request_code", "response_code"),
    "Time from reading a remoting request to its answer being ready, in milliseconds "
    "(a long-polling pull includes its wait).",
    "RocketMQ 5",
)
SPECS = (RPC_LATENCY,)
_LE = [f"{bound:g}" for bound in BOUNDS_MS]


class RemotingCollector:
    def __init__(self, node: Node, server: RemotingServer) -> None:
        self.node = node
        self.server = server

    def collect(self) -> Iterator[Metric]:
        family = RPC_LATENCY.family()
        assert isinstance(family, HistogramMetricFamily)
        for request_code, response_code, row in self.server.latency.rows():
            cumulative, buckets = 0.0, []
            for le, count in zip([*_LE, "+Inf"], row[:-1], strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            labels = [*self.node, "remoting", str(request_code), str(response_code)]
            family.add_metric(labels, buckets, sum_value=row[-1])
        yield family
