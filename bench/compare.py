"""ferrymq beside RabbitMQ and NATS JetStream, in one run, as one table.

Runs `ferrymq bench produce|consume|e2e` and the peer scripts in `bench/peers/` one after another
(each in its own process, so none slows another), collects their JSON lines and prints one table:
msg/s, MB/s, latency percentiles, the CPU of client and server, and which was the bottleneck.

    .venv/bin/python bench/compare.py [--count 50000] [--rate 2000] [--duration 10] [--save FILE]

With --tls it compares ferrymq with itself instead: produce batch 32 in plaintext and over TLS, in
turns (--rounds of each), each on a fresh `ferrymq dev` (permissive TLS with a throwaway certificate).

With --per-message it runs the one-message-at-a-time scenarios, ferrymq and its peer taking turns,
--rounds times (the median of each is the figure), and checks them against the targets:

- single sends, 64 in flight, ASYNC_FLUSH >= NATS JetStream's pipelined publishes (nats-py, 64 acks
  pending), and the broker's CPU per send <= 2x nats-server's per publish;
- single sends with SYNC_FLUSH (an ack means fdatasync'd, by group commit) >= 3x RabbitMQ's
  publish-with-confirms (pika), 64 in flight against a window of 64 confirms, and 1 against 1;
- end to end at --rate msg/s: p50 and p99 <= NATS JetStream's.

Beside the SYNC_FLUSH sends it runs the disk's floor (`fdatasync_floor.py`: 1 KiB written and
fdatasync'd, one at a time): with one send in flight neither broker can ack durably faster.

Every row has the CPU per message of client and server (`client_us`, `server_us`): for the peers
from /proc/<pid>/stat of nats-server and RabbitMQ's beam.smp before and after the measured phase.
"""

from __future__ import annotations

import argparse
import json
import statistics
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


def per_message_runs(
    count: int, rate: int, duration: float, sync_only: bool = False
) -> list[tuple[str, list[str]]]:
    """(label, command) for the per-message targets: each ferrymq scenario just before its peer's.
    `sync_only`: the durable-ack ones only (SYNC_FLUSH sends, pika's confirms, the disk's floor)."""
    ferrymq = [PY, "-m", "ferrymq", "bench"]
    nats = [PY, str(HERE / "peers" / "nats_bench.py")]
    rabbit = [PY, str(HERE / "peers" / "rabbitmq_bench.py")]
    single = ["--batch", "1", "--inflight"]
    sync = ["--flush", "SYNC_FLUSH"]
    one_by_one = str(max(1, count // 10))  # one in flight runs at a few thousand msg/s at most
    e2e = ["--rate", str(rate), "--duration", str(duration)]

    def way(name: str) -> list[str]:
        return ["produce", "--produce-way", name]

    durable = [
        ("ferrymq single 64 sync", [*ferrymq, "produce", "--count", str(count), *single, "64", *sync]),
        ("rabbitmq pika window 64", [*rabbit, *way("pipelined"), "--count", str(count // 2)]),
        ("disk fdatasync floor", [PY, str(HERE / "fdatasync_floor.py"), "--count", one_by_one]),
        ("ferrymq single 1 sync", [*ferrymq, "produce", "--count", one_by_one, *single, "1", *sync]),
        ("rabbitmq pika 1 in flight", [*rabbit, *way("blocking"), "--count", one_by_one]),
    ]
    if sync_only:
        return durable
    return [
        ("ferrymq single 64 async", [*ferrymq, "produce", "--count", str(count), *single, "64"]),
        ("nats pipelined 64", [*nats, *way("pipelined"), "--count", str(count)]),
        *durable,
        (f"ferrymq e2e {rate}", [*ferrymq, "e2e", *e2e]),
        (f"nats e2e {rate}", [*nats, "e2e", *e2e]),
        (f"rabbitmq pika e2e {rate}", [*rabbit, "e2e", *e2e]),
    ]


def per_message_targets(results: list[dict], rate: int) -> list[dict]:
    """Each target with the two figures it compares (medians by label) and whether it is met."""
    figure = _medians(results)

    def check(target: str, ours: str, key: str, peer: str, factor: float, better: str) -> dict:
        mine, theirs = figure(ours, key), figure(peer, key)
        bound = None if theirs is None else factor * theirs
        met = None
        if mine is not None and bound is not None:
            met = mine >= bound if better == "more" else mine <= bound
        return {"target": target, "ferrymq": mine, "bound": bound, "peer": theirs, "met": met}

    e2e_ours, e2e_nats = f"ferrymq e2e {rate}", f"nats e2e {rate}"
    return [
        check("single 64 async msg/s >= NATS pipelined", "ferrymq single 64 async", "msgs_per_s",
              "nats pipelined 64", 1, "more"),
        check("broker us/send <= 2x nats-server's", "ferrymq single 64 async", "server_us",
              "nats pipelined 64", 2, "less"),
        check("single 64 sync msg/s >= 3x pika window 64", "ferrymq single 64 sync", "msgs_per_s",
              "rabbitmq pika window 64", 3, "more"),
        check("single 1 sync msg/s >= 3x pika 1 in flight", "ferrymq single 1 sync", "msgs_per_s",
              "rabbitmq pika 1 in flight", 3, "more"),
        check("pika 1 in flight <= the disk's fdatasync floor", "rabbitmq pika 1 in flight", "msgs_per_s",
              "disk fdatasync floor", 1, "less"),
        check("single 1 sync <= the disk's fdatasync floor", "ferrymq single 1 sync", "msgs_per_s",
              "disk fdatasync floor", 1, "less"),
        check(f"e2e {rate} p50 <= NATS", e2e_ours, "p50_ms", e2e_nats, 1, "less"),
        check(f"e2e {rate} p99 <= NATS", e2e_ours, "p99_ms", e2e_nats, 1, "less"),
    ]  # fmt: skip


def _medians(results: list[dict]):
    """figure(label, key): the median of `key` over the runs of `label` that have it, else None."""

    def figure(label: str, key: str) -> float | None:
        values = [r[key] for r in results if r["label"] == label and r.get(key) is not None]
        return round(statistics.median(values), 3) if values else None

    return figure


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
    for side, ours in (("client", "client_us_per_msg"), ("server", "broker_us_per_msg")):
        pct, rate = result.get(f"{side}_cpu_pct"), result.get("msgs_per_s")
        if ours in result:
            result[f"{side}_us"] = result[ours]
        elif pct is not None and rate:  # a peer: its CPU share over the phase, per message of it
            result[f"{side}_us"] = round(pct * 1e4 / rate, 2)
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
        "client_us",
        "server_us",
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
    parser.add_argument(
        "--per-message", action="store_true", help="single sends (async and sync flush) and e2e: the targets"
    )
    parser.add_argument("--rounds", type=int, default=3, help="with --tls or --per-message: runs of each")
    parser.add_argument(
        "--sync-only", action="store_true",
        help="with --per-message: only SYNC_FLUSH sends, pika's confirms and the disk's fdatasync floor",
    )  # fmt: skip
    parser.add_argument(
        "--only", action="append", metavar="TEXT",
        help="with --per-message: only the runs whose label holds TEXT (repeatable: sync, e2e...)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.tls:
        plan = tls_runs(args.count, args.rounds)
    elif args.per_message:
        plan = per_message_runs(args.count, args.rate, args.duration, args.sync_only) * args.rounds
        if args.only:
            plan = [(label, command) for label, command in plan if any(text in label for text in args.only)]
    else:
        plan = runs(args.count, args.rate, args.duration)
    results = [run(label, command) for label, command in plan]
    print(table(results))
    summary: dict | list | None = None
    if args.tls:
        summary = tls_summary(results)
    elif args.per_message:
        summary = per_message_targets(results, args.rate)
    if summary is not None:
        print(json.dumps(summary, indent=1))
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
