"""One `ferrymq bench` command on two source trees, alternated run by run so both see the same
machine: the median of each, and the new tree's figure as a share of the old one's.

    .venv/bin/python bench/ab.py --base ../base-checkout --pairs 5 \\
        --save bench/results/ab-produce-batch32.json -- produce --count 600000 --batch 32 --inflight 8

`--base` is a checkout of the code before a change (`git worktree add ../base-checkout <commit>`, with
its C accelerators built or copied in); the tree this script lives in is the new one. Rates compare by
msgs_per_s, fixed-rate (e2e) runs by p50_ms and p99_ms.
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
from repeat import run_once

NEW = Path(__file__).resolve().parent.parent


def tree_env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree / "src")}


def commit_of(tree: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", required=True, type=Path, help="checkout of the code before the change")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--save", required=True)
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="`ferrymq bench` arguments")
    args = parser.parse_args()
    bench_args = [a for a in args.bench_args if a != "--"]
    trees = {"base": args.base.resolve(), "new": NEW}
    runs: dict[str, list[dict]] = {"base": [], "new": []}
    for i in range(args.pairs):
        order = ("base", "new") if i % 2 == 0 else ("new", "base")
        for name in order:
            runs[name].append(run_once(bench_args, tree_env(trees[name])))
            print(f"pair {i + 1}/{args.pairs} {name}: {json.dumps(runs[name][-1])}", file=sys.stderr)
    figures = ["p50_ms", "p99_ms"] if "p99_ms" in runs["base"][0] else ["msgs_per_s"]
    keys = figures + [k for k in runs["base"][0] if k.endswith("_us_per_msg")]
    median = {name: {k: statistics.median(r[k] for r in rs) for k in keys} for name, rs in runs.items()}
    report = {
        "suite": Path(args.save).stem,
        "command": "./run bench " + shlex.join(bench_args),
        "commits": {name: commit_of(tree) for name, tree in trees.items()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "median": median,
        "new_over_base_pct": {k: round(100 * median["new"][k] / median["base"][k], 1) for k in figures},
        "runs": runs,
    }
    Path(args.save).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("median", "new_over_base_pct")}))


if __name__ == "__main__":
    main()
