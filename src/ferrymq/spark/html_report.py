"""The trace report as one self-contained HTML page: tables and inline SVG charts, no scripts."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from html import escape

from ferrymq.spark.trace_report import Report

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}th{background:#f4f4f4}"
    "td:first-child,td:nth-child(2){text-align:left}"
    "svg{background:#fafafa;border:1px solid #ddd;margin:1em 0}"
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


def line_chart(title: str, series: dict[str, list[tuple[datetime, int]]], width=760, height=260) -> str:
    """Counts over time, one line per series, with time on x and a zero-based y axis."""
    points = [p for s in series.values() for p in s]
    if not points:
        return f"<p>{escape(title)}: no data.</p>"
    left, bottom, top, right = 60, 30, 30, 160
    x0, x1 = min(p[0] for p in points).timestamp(), max(p[0] for p in points).timestamp()
    y1 = max(p[1] for p in points) or 1
    sx = (width - left - right) / ((x1 - x0) or 1)
    sy = (height - top - bottom) / y1

    def xy(t: datetime, v: int) -> str:
        return f"{left + (t.timestamp() - x0) * sx:.1f},{height - bottom - v * sy:.1f}"

    parts = [
        f'<svg width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
        f'<text x="{left}" y="18" font-weight="bold">{escape(title)}</text>',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" '
        'stroke="#888"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#888"/>',
        f'<text x="{left - 6}" y="{top + 4}" text-anchor="end" font-size="11">{y1:,}</text>',
        f'<text x="{left - 6}" y="{height - bottom}" text-anchor="end" font-size="11">0</text>',
        f'<text x="{left}" y="{height - 8}" font-size="11">{datetime.fromtimestamp(x0):%H:%M:%S}</text>',
        f'<text x="{width - right}" y="{height - 8}" text-anchor="end" font-size="11">'
        f"{datetime.fromtimestamp(x1):%H:%M:%S}</text>",
    ]
    for i, (name, pts) in enumerate(sorted(series.items())):
        color = COLORS[i % len(COLORS)]
        path = " ".join(xy(t, v) for t, v in sorted(pts))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}"/>')
        y = top + 16 * i
        parts.append(f'<rect x="{width - right + 10}" y="{y}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{width - right + 26}" y="{y + 9}" font-size="12">{escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(title: str, bars: dict[str, dict[str, float]], width=760) -> str:
    """Horizontal grouped bars: one group per label, one bar per measure (p50, p90, p99)."""
    if not bars:
        return f"<p>{escape(title)}: no data.</p>"
    measures = sorted({m for values in bars.values() for m in values})
    top_value = max(v for values in bars.values() for v in values.values()) or 1
    row, label_w = 14, 220
    height = 40 + len(bars) * (len(measures) * row + 10)
    parts = [f'<svg width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
             f'<text x="10" y="18" font-weight="bold">{escape(title)}</text>']  # fmt: skip
    y = 30
    for label, values in bars.items():
        parts.append(f'<text x="10" y="{y + row}" font-size="12">{escape(label)}</text>')
        for i, m in enumerate(measures):
            v = values.get(m, 0)
            w = (width - label_w - 90) * v / top_value
            parts.append(
                f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{row - 2}" fill="{COLORS[i]}"/>'
            )
            parts.append(
                f'<text x="{label_w + w + 4}" y="{y + row - 3}" font-size="11">{escape(m)} {v:,.0f} ms</text>'
            )
            y += row
        y += 10
    parts.append("</svg>")
    return "".join(parts)


def _series(rows: list[dict], key: str) -> dict[str, list[tuple[datetime, int]]]:
    out: dict[str, list[tuple[datetime, int]]] = {}
    for r in rows:
        out.setdefault(r[key] or "?", []).append((r["bucket"], r["messages"]))
    return out


def render(report: Report) -> str:
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
        line_chart("Sent, per topic", _series(report.produced, "topic")),
        line_chart("Delivered, per consumer group", _series(report.consumed, "group")),
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
