"""One metric's name, type, labels and meaning: what a collector emits and what docs/metrics.md lists."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

NODE = ("cluster", "node_type", "node_id")
"""RocketMQ 5's labels naming the node a native metric comes from."""

_KINDS = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily, "histogram": HistogramMetricFamily}


@dataclass(frozen=True)
class Spec:
    name: str
    kind: str  # counter, gauge or histogram
    labels: tuple[str, ...]
    help: str
    origin: str = "ferrymq"  # where the name comes from: "RocketMQ 5", "rocketmq-exporter" or "ferrymq"

    def family(self) -> Metric:
        return _KINDS[self.kind](self.name, self.help, labels=self.labels)


def sample(family: Metric, labels: Sequence[object], value: float) -> None:
    """Add one sample of a counter or gauge family (label values in the spec's order)."""
    family.add_metric([str(v) for v in labels], value)  # type: ignore[attr-defined]
