"""The trace report as one self-contained HTML page: tables, and charts drawn by matplotlib (the
Object-oriented Figure API, no pyplot state or GUI backend) inlined as SVG; no scripts."""

from __future__ import annotations

import io
from collections.abc import Iterable
from datetime import datetime
from html import escape

import matplotlib
from matplotlib.dates import AutoDateLocator, DateFormatter
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ferrymq.spark.trace_report import Report

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}th{background:#f4f4f4}"
    "td:first-child,td:nth-child(2){text-align:left}"
    "svg{display:block;margin:1em 0;max-width:100%;height:auto}"
)


def table(headers: list[str], rows: Iterable[Iterable]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(_fmt(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>" if body else "<p>None.</p>"


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "" if value is None else str(value)


def svg(figure: Figure) -> str:
    """`figure` as an inline <svg> element (text kept as text, so it scales and can be searched)."""
    out = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "ferrymq"}):
        figure.savefig(out, format="svg", bbox_inches="tight")
    text = out.getvalue()
    return text[text.index("<svg") :]


def line_chart(title: str, series: dict[str, list[tuple[datetime, int]]], unit: str) -> str:
    """Counts over time, one line per series: time on x, `unit` on a zero-based y axis."""
    if not any(series.values()):
        return f"<p>{escape(title)}: no data.</p>"
    figure = Figure(figsize=(8, 3))
    ax = figure.add_subplot()
    for i, (name, points) in enumerate(sorted(series.items())):
        times, counts = zip(*sorted(points), strict=True)
        ax.plot(times, counts, marker="o", markersize=3, color=COLORS[i % len(COLORS)], label=name)
    ax.set_title(title)
    ax.set_xlabel("store time (hh:mm:ss)")
    ax.set_ylabel(unit)
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(AutoDateLocator())
    ax.xaxis.set_major_formatter(DateFormatter("%H:%M:%S"))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    return svg(figure)


def bar_chart(title: str, bars: dict[str, dict[str, float]], unit: str = "ms") -> str:
    """Horizontal grouped bars: one group per label, one bar per measure (p50, p90, p99)."""
    if not bars:
        return f"<p>{escape(title)}: no data.</p>"
    measures = sorted({m for values in bars.values() for m in values})
    labels = list(bars)
    height = 1 / (len(measures) + 1)
    figure = Figure(figsize=(8, 1 + 0.5 * len(labels) * len(measures) * height * 3))
    ax = figure.add_subplot()
    for i, measure in enumerate(measures):
        values = [bars[label].get(measure, 0) for label in labels]
        positions = [row + i * height for row in range(len(labels))]
        drawn = ax.barh(positions, values, height=height, color=COLORS[i % len(COLORS)], label=measure)
        ax.bar_label(drawn, fmt=f"%.0f {unit}", padding=3, fontsize="small")
    ax.set_yticks([row + height * (len(measures) - 1) / 2 for row in range(len(labels))], labels)
    ax.invert_yaxis()
    ax.set_title(title)
    ax.set_xlabel(f"latency ({unit})")
    ax.set_xlim(0, max(max(v.values(), default=0) for v in bars.values()) * 1.2 or 1)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    return svg(figure)


def _series(rows: list[dict], key: str) -> dict[str, list[tuple[datetime, int]]]:
    out: dict[str, list[tuple[datetime, int]]] = {}
    for r in rows:
        out.setdefault(r[key] or "?", []).append((r["bucket"], r["messages"]))
    return out


def render(report: Report) -> str:
    per_bucket = f"messages per {report.bucket_seconds} s"
    latency_bars = {
        f"{r['topic']} → {r['group']}": {"p50": r["p50_ms"], "p90": r["p90_ms"], "p99": r["p99_ms"]}
        for r in report.latency
    }
    sections = [
        "<h1>ferrymq message trace report</h1>",
        "<h2>Trace records</h2>",
        table(["type", "records"], sorted(report.records.items())),
        "<h2>Produce → consume latency (first delivery)</h2>",
        table(["topic", "group", "deliveries", "p50 ms", "p90 ms", "p99 ms", "max ms"],
              ([r["topic"], r["group"], r["deliveries"], r["p50_ms"], r["p90_ms"], r["p99_ms"], r["max_ms"]]
               for r in report.latency)),
        bar_chart("Latency percentiles", latency_bars),
        f"<h2>Throughput (messages per {report.bucket_seconds} s)</h2>",
        line_chart("Sent, per topic", _series(report.produced, "topic"), per_bucket),
        line_chart("Delivered, per consumer group", _series(report.consumed, "group"), per_bucket),
        "<h2>Retries</h2>",
        table(["topic", "group", "redeliveries", "failed consumes"],
              ([r["topic"], r["group"], r["redeliveries"], r["failed"]] for r in report.retries)),
        "<h2>Failed sends</h2>",
        table(["topic", "failed sends"], ([r["topic"], r["failed"]] for r in report.send_failures)),
        "<h2>Dead letters</h2>",
        table(["group", "messages in %DLQ%group"], sorted(report.dead_letters.items())),
    ]  # fmt: skip
    body = "\n".join(sections)
    return f'<!doctype html><html><head><meta charset="utf-8"><title>ferrymq trace report</title>' \
           f"<style>{STYLE}</style></head><body>{body}</body></html>"  # fmt: skip
