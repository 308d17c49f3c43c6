"""ferrymq beside RabbitMQ and NATS JetStream, in one run, as one table.

Runs `ferrymq bench produce|consume|e2e` and the peer scripts in `bench/peers/` one after another
(each in its own process, so none slows another), collects their JSON lines and prints one table:
msg/s, MB/s, latency percentiles, the CPU of client and server, and which was the bottleneck.

    .venv/bin/python bench/compare.py [--count 50000] [--rate 2000] [--duration 10] [--save FILE]

With --tls it compares ferrymq with itself instead: produce batch 32 in plaintext and over TLS, in
turns (--rounds of each), each on a fresh `ferrymq dev` (permissive TLS with a throwaway certificate).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from ferrymq.bench.machine import machine_info

HERE = Path(__file__).resolve().parent
PY = sys.executable


def runs(count: int, rate: int, duration: float) -> list[tuple[str, list[str]]]:
    """(label, command) for every system, client and scenario."""
    ferrymq = [PY, "-m", "ferrymq", "bench"]
    common = ["--count", str(count)]
    e2e = ["--rate", str(rate), "--duration", str(duration)]
    out = [
        ("ferrymq produce batch 32", [*ferrymq, "produce", *common, "--batch", "32", "--inflight", "8"]),
        (
            "ferrymq produce 1/request",
            [*ferrymq, "produce", "--count", str(count // 4), "--batch", "1", "--inflight", "64"],
        ),
        ("ferrymq consume", [*ferrymq, "consume", *common]),
        ("ferrymq e2e", [*ferrymq, "e2e", *e2e]),
    ]
    for script, clients in (("rabbitmq_bench.py", ("pika", "aio-pika")), ("nats_bench.py", (None,))):
        for client in clients:
            chosen = ["--client", client] if client else []
            for scenario in ("produce", "consume", "e2e"):
                extra = e2e if scenario == "e2e" else common
                label = f"{script.split('_')[0]}{' ' + client if client else ''} {scenario}"
                out.append((label, [PY, str(HERE / "peers" / script), scenario, *chosen, *extra]))
    return out


def tls_runs(count: int, rounds: int) -> list[tuple[str, list[str]]]:
    """Produce batch 32 in plaintext and over TLS, taking turns, `rounds` times each."""
    produce = [
        PY,
        "-m",
        "ferrymq",
        "bench",
        "produce",
        "--count",
        str(count),
        "--batch",
        "32",
        "--inflight",
        "8",
    ]
    return [
        run for i in range(rounds)
        for run in ((f"plaintext #{i + 1}", produce), (f"tls #{i + 1}", [*produce, "--tls"]))
    ]  # fmt: skip


def tls_summary(results: list[dict]) -> dict:
    """Median msg/s and CPU per message of each side, and TLS's msg/s as a share of plaintext's."""

    def median(side: str, key: str) -> float:
        values = sorted(r[key] for r in results if r["label"].startswith(side) and key in r)
        return values[len(values) // 2] if values else float("nan")

    sides = {
        side: {key: median(side, key) for key in ("msgs_per_s", "client_us_per_msg", "broker_us_per_msg")}
        for side in ("plaintext", "tls")
    }
    return {
        **sides,
        "tls_share_of_plaintext": round(sides["tls"]["msgs_per_s"] / sides["plaintext"]["msgs_per_s"], 3),
    }


def run(label: str, command: list[str]) -> dict:
    started = time.monotonic()
    print(f"... {label}", file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        error = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"label": label, "error": error}
    result = json.loads(lines[-1])
    result["label"] = label
    result.setdefault("server_cpu_pct", result.get("broker_cpu_pct"))
    result["wall_seconds"] = round(time.monotonic() - started, 1)
    return result


def table(results: list[dict]) -> str:
    columns = (
        "label",
        "msgs_per_s",
        "mb_per_s",
        "p50_ms",
        "p99_ms",
        "client_cpu_pct",
        "server_cpu_pct",
        "bottleneck",
    )
    rows = [columns] + [tuple("-" if r.get(c) is None else str(r.get(c)) for c in columns) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    errors = [f"{r['label']}: {r['error']}" for r in results if "error" in r]
    return "\n".join(lines + (["", "failed:", *errors] if errors else []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--tls", action="store_true", help="produce batch 32: plaintext against TLS")
    parser.add_argument("--rounds", type=int, default=3, help="with --tls: runs of each side")
    args = parser.parse_args()
    plan = tls_runs(args.count, args.rounds) if args.tls else runs(args.count, args.rate, args.duration)
    results = [run(label, command) for label, command in plan]
    print(table(results))
    summary = tls_summary(results) if args.tls else None
    if summary is not None:
        print(json.dumps(summary))
    if args.save:
        args.save.write_text(
            json.dumps(
                {
                    "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "machine": machine_info(),
                    "params": vars(args) | {"save": str(args.save)},
                    "results": results,
                    **({"summary": summary} if summary is not None else {}),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
