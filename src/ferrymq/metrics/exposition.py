"""Prometheus's text format (0.0.4) of metric families, written for many samples.

prometheus-client's ``generate_latest`` validates and escapes every label name of every sample; a
broker with thousands of (topic, group) series spends most of a scrape there, on its event loop.
Our label names are fixed identifiers, so only label values are escaped here, each distinct value
once per scrape (the cluster, node and topic names repeat on every line); the output holds the same
samples (a test compares the two).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from prometheus_client.core import Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_TYPES = {"counter", "gauge", "histogram", "summary"}


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _number(value: float) -> str:
    if value.__class__ is int:
        return f"{value}.0"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def render(families: Iterable[Metric]) -> bytes:
    out: list[str] = []
    escaped: dict[str, str] = {}
    for family in families:
        name = family.name + "_total" if family.type == "counter" else family.name
        kind = family.type if family.type in _TYPES else "untyped"
        doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        for s in family.samples:
            if s.labels:
                parts = []
                for k, v in s.labels.items():
                    e = escaped.get(v)
                    if e is None:
                        e = escaped[v] = _escape(v)
                    parts.append(f'{k}="{e}"')
                labels = ",".join(parts)
                out.append(f"{s.name}{{{labels}}} {_number(s.value)}\n")
            else:
                out.append(f"{s.name} {_number(s.value)}\n")
    return "".join(out).encode()
