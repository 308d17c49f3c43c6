"""What enabling message trace costs a producer: runs with and without `--trace`, alternated so both
see the same machine, and the median of each (the target: at most 15 % of the throughput).

    .venv/bin/python bench/trace_cost.py --pairs 5 --save bench/results/trace-cost-batch32.json -- \\
        produce --count 600000 --batch 32 --inflight 8
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from ferrymq.bench.machine import machine_info
from repeat import parse_args, run_once


def main() -> None:
    args, plain = parse_args(__doc__, "pairs", 5)
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for i in range(args.pairs):
        for name, extra in (("off", []), ("on", ["--trace"])):
            runs[name].append(run_once([*plain, *extra]))
            print(
                f"pair {i + 1}/{args.pairs} trace {name}: {runs[name][-1]['msgs_per_s']} msg/s",
                file=sys.stderr,
            )
    median = {name: statistics.median(r["msgs_per_s"] for r in rs) for name, rs in runs.items()}
    report = {
        "suite": Path(args.save).stem,
        "command": "./run bench " + " ".join(plain) + " [--trace]",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "median_msgs_per_s": median,
        "trace_cost_pct": round(100 * (1 - median["on"] / median["off"]), 1),
        "runs": runs,
    }
    Path(args.save).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("median_msgs_per_s", "trace_cost_pct")}))


if __name__ == "__main__":
    main()
