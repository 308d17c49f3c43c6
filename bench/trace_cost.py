"""What enabling message trace costs a producer: runs with and without `--trace`, alternated so both
see the same machine, and the median of each (the target: at most 15 % of the throughput).

    .venv/bin/python bench/trace_cost.py --pairs 5 --save bench/results/trace-cost-batch32.json -- \\
        produce --count 600000 --batch 32 --inflight 8
"""

from __future__ import annotations

import json

from flag_cost import measure
from repeat import parse_args


def main() -> None:
    args, plain = parse_args(__doc__, "pairs", 5)
    report = measure("--trace", args.pairs, args.save, plain)
    print(json.dumps({k: report[k] for k in ("median_msgs_per_s", "cost_pct")}))


if __name__ == "__main__":
    main()
