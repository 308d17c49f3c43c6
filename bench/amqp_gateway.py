"""The AMQP gateway beside RabbitMQ, in one run: the same peer script (bench/peers/rabbitmq_bench.py,
pika and aio-pika) publishes with confirms and consumes with manual acks against the machine's
RabbitMQ and against `ferrymq dev`'s gateway (broker in the same process, so its CPU is gateway +
broker), alternating run by run. Each row: msg/s and server CPU per message (µs).

    .venv/bin/python bench/amqp_gateway.py [--runs 3] [--count 20000] [--save bench/results/amqp-gateway.json]

`--base DIR` adds a gateway running the code of another checkout (the code before a change), measured
in the same alternation ("ferrymq-base"); `--only TEXT` keeps the scenarios whose label contains it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEER = HERE / "peers" / "rabbitmq_bench.py"
sys.path.insert(0, str(HERE / "peers"))
import common  # noqa: E402

# (label, client, scenario, extra options): pika waits for each confirm (one in flight) unless its
# pipelined form is better; aio-pika keeps a window of confirms; consumers prefetch 100, ack each
SCENARIOS = [
    ("pika publish, confirms", "pika", "produce", ["--inflight", "64"]),
    ("pika consume, prefetch 100", "pika", "consume", ["--batch", "100", "--ack-every", "1"]),
    ("aio-pika publish, confirm window 500", "aio-pika", "produce", ["--inflight", "500"]),
    ("aio-pika consume, prefetch 100", "aio-pika", "consume", ["--batch", "100", "--ack-every", "1"]),
]


def start_gateway(where: Path, port: int, tree: Path | None = None) -> subprocess.Popen:
    """`ferrymq dev` with its gateway on `port`, which must be free (a gateway already there would be
    measured instead); from the checkout `tree` when given (its own venv's Python if it has one)."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            raise SystemExit(f"port {port} is taken: pick another with --port")
    python, env = sys.executable, None
    if tree is not None:
        own = tree / ".venv" / "bin" / "python"
        python = str(own) if own.exists() else python
        env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    argv = [python, "-m", "ferrymq", "dev", "--data-dir", str(where), "--namesrv-port", "0",
            "--broker-port", "0", "--proxy-port", "-1", "--console-port", "-1",
            "--amqp-port", str(port)]  # fmt: skip
    where.parent.mkdir(parents=True, exist_ok=True)
    log = open(where.parent / "gateway.log", "wb")  # noqa: SIM115  (open as long as the process)
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the gateway did not start on port {port}: see {where.parent / 'gateway.log'}")


def run(url: str, pids: list[int], client: str, scenario: str, extra: list[str], count: int) -> dict:
    argv = [sys.executable, str(PEER), scenario, "--client", client, "--url", url, "--count", str(count),
            "--body-size", "100", *extra, *(a for p in pids for a in ("--server-pid", str(p)))]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    line = json.loads(lines[-1])
    cpu = line.get("server_cpu_pct")
    line["server_us_per_msg"] = (
        None if cpu is None else round(cpu / 100 * line["seconds"] / line["messages"] * 1e6, 1)
    )
    return line


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--count", type=int, default=20_000)
    p.add_argument("--port", type=int, default=25676)
    p.add_argument("--save", type=Path)
    p.add_argument("--base", type=Path, help="a checkout of the code before a change, measured alongside")
    p.add_argument("--only", default="", help="only the scenarios whose label contains this")
    p.add_argument("--skip-rabbitmq", action="store_true")
    args = p.parse_args()
    rabbit = common.find_pids("beam.smp", "rabbit")
    if not rabbit and not args.skip_rabbitmq:
        raise SystemExit("no RabbitMQ (beam.smp) runs on this machine")
    loads = [os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        gateways = {"ferrymq": start_gateway(Path(tmp) / "new" / "data", args.port)}
        if args.base is not None:
            gateways["ferrymq-base"] = start_gateway(Path(tmp) / "base" / "data", args.port + 1, args.base)
        try:
            systems = (
                {} if args.skip_rabbitmq else {"rabbitmq": ("amqp://guest:guest@127.0.0.1:5672/%2F", rabbit)}
            )
            for i, (name, gateway) in enumerate(gateways.items()):
                systems[name] = (f"amqp://guest:guest@127.0.0.1:{args.port + i}/%2F", [gateway.pid])
            rows = []
            for label, client, scenario, extra in (s for s in SCENARIOS if args.only in s[0]):
                found: dict[str, list[dict]] = {name: [] for name in systems}
                for i in range(args.runs):
                    names = list(systems)
                    for name in names[i % len(names) :] + names[: i % len(names)]:  # each goes first in turn
                        url, pids = systems[name]
                        found[name].append(run(url, pids, client, scenario, extra, args.count))
                        print(
                            f"{label:40} {name:12} {found[name][-1].get('msgs_per_s')} msg/s "
                            f"{found[name][-1].get('server_us_per_msg')} us/msg",
                            file=sys.stderr,
                        )
                    loads.append(os.getloadavg())
                rows.append({"scenario": label, **{name: summary(runs) for name, runs in found.items()}})
        finally:
            for gateway in gateways.values():
                gateway.terminate()
                gateway.wait(30)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "load_avg": os.getloadavg(),
        "load_1min_range": [min(load[0] for load in loads), max(load[0] for load in loads)],
        "count": args.count,
        "base": str(args.base) if args.base else None,
        "rows": rows,
    }
    for row in rows:
        ours = row["ferrymq"]
        for other, suffix in (("rabbitmq", ""), ("ferrymq-base", "_vs_base")):
            theirs = row.get(other)
            if theirs is None:
                continue
            row["rate_ratio" + suffix] = (
                round(ours["msgs_per_s"] / theirs["msgs_per_s"], 2) if theirs["msgs_per_s"] else None
            )
            if ours["server_us_per_msg"] and theirs["server_us_per_msg"]:
                row["cpu_ratio" + suffix] = round(ours["server_us_per_msg"] / theirs["server_us_per_msg"], 2)
    print(json.dumps(result, indent=1))
    if args.save:
        args.save.write_text(json.dumps(result, indent=1) + "\n")


def summary(runs: list[dict]) -> dict:
    """Medians over the runs that finished, and every run's figures."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return {"msgs_per_s": 0, "server_us_per_msg": None, "errors": [r["error"] for r in runs]}
    cpu = [r["server_us_per_msg"] for r in good if r["server_us_per_msg"] is not None]
    return {
        "msgs_per_s": round(statistics.median(r["msgs_per_s"] for r in good)),
        "server_us_per_msg": round(statistics.median(cpu), 1) if cpu else None,
        "client_cpu_pct": round(statistics.median(r["client_cpu_pct"] for r in good), 1),
        "runs": [(r["msgs_per_s"], r["server_us_per_msg"]) for r in good],
        "variant": good[0].get("variant"),
    }


if __name__ == "__main__":
    main()
