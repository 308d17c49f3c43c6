"""What one `ferrymq bench` flag costs: runs without and with it, alternated so both see the same
machine, and the median of each.

    .venv/bin/python bench/flag_cost.py --flag=--acl --pairs 5 \\
        --save bench/results/acl-cost-batch32.json -- produce --count 600000 --batch 32 --inflight 8
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from ferrymq.bench.machine import machine_info
from repeat import run_once


def measure(flag: str, pairs: int, save: str, plain: list[str]) -> dict:
    """`pairs` alternated runs of `ferrymq bench <plain>` without and with `flag`; the report, saved."""
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for i in range(pairs):
        for name, extra in (("off", []), ("on", [flag])):
            runs[name].append(run_once([*plain, *extra]))
            print(
                f"pair {i + 1}/{pairs} {flag} {name}: {runs[name][-1]['msgs_per_s']} msg/s", file=sys.stderr
            )
    median = {name: statistics.median(r["msgs_per_s"] for r in rs) for name, rs in runs.items()}
    cpu = {
        name: statistics.median(r[key] for r in rs)
        for name, rs in runs.items()
        for key in ("broker_us_per_msg",)
        if all(key in r for r in rs)
    }
    report = {
        "suite": Path(save).stem,
        "command": "./run bench " + " ".join(plain) + f" [{flag}]",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "median_msgs_per_s": median,
        "median_broker_us_per_msg": cpu,
        "on_vs_off_pct": round(100 * median["on"] / median["off"], 1),
        "cost_pct": round(100 * (1 - median["on"] / median["off"]), 1),
        "runs": runs,
    }
    Path(save).write_text(json.dumps(report, indent=1) + "\n")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--flag", required=True, help="the `ferrymq bench` flag to price, e.g. --flag=--acl")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--save", required=True)
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="`ferrymq bench` arguments")
    args = parser.parse_args()
    report = measure(args.flag, args.pairs, args.save, [a for a in args.bench_args if a != "--"])
    print(
        json.dumps({k: report[k] for k in ("median_msgs_per_s", "on_vs_off_pct", "median_broker_us_per_msg")})
    )


if __name__ == "__main__":
    main()
