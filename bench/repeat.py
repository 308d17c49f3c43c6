"""Run one `ferrymq bench` command several times and save every run with the median one.

Rates on a 2-core machine move 10-20 % between back-to-back runs; a committed figure is the median
of a few, with all of them beside it and the machine (speed and load) they ran on.

    .venv/bin/python bench/repeat.py --runs 3 --save bench/results/sdk-consume.json -- consume --count 600000

The median is by msgs_per_s, or by p99_ms for a fixed-rate (e2e) run and late_p99_s for redelivery.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ferrymq.bench.machine import machine_info


def run_once(bench_args: list[str], env: dict[str, str] | None = None) -> dict:
    load = os.getloadavg()[0]
    out = subprocess.run(
        [sys.executable, "-m", "ferrymq", "bench", *bench_args],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["load_average_1m_at_start"] = round(load, 2)
    return result


def median_run(runs: list[dict]) -> dict:
    key = next(k for k in ("p99_ms", "late_p99_s", "msgs_per_s") if k in runs[0])
    middle = statistics.median_low(r[key] for r in runs)
    return next(r for r in runs if r[key] == middle)


def parse_args(doc: str, count: str, default: int) -> tuple[argparse.Namespace, list[str]]:
    """`--<count> N --save FILE -- <ferrymq bench arguments>`: the options, and the bench arguments."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(f"--{count}", type=int, default=default)
    parser.add_argument("--save", required=True)
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="`ferrymq bench` arguments")
    args = parser.parse_args()
    return args, [a for a in args.bench_args if a != "--"]


def main() -> None:
    args, bench_args = parse_args(__doc__, "runs", 3)
    runs = []
    for i in range(args.runs):
        runs.append(run_once(bench_args))
        print(f"run {i + 1}/{args.runs}: {json.dumps(runs[-1])}", file=sys.stderr)
    report = {
        "suite": Path(args.save).stem,
        "command": "./run bench " + shlex.join(bench_args),
        "runs": args.runs,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "median_run": median_run(runs),
        "all_runs": runs,
    }
    Path(args.save).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["median_run"]))


if __name__ == "__main__":
    main()
