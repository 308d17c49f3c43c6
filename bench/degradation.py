"""Degradation to a standby cluster: with the whole primary cluster (NameServer + 2 brokers) SIGKILLed,
a producer's sends keep succeeding (to the standby); after the primary returns, `ferrymq relay` puts
every diverted message back and a consumer of the primary receives every acknowledged message.

Each trial starts fresh processes (see ferrymq.bench.degradation): the producer sends at `--rate`
msg/s with no retries of its own, the primary is killed after `--warmup` s, restarted after
`--outage` s, and the producer runs until it sends to the primary again, then 12 s more. Reported
per trial: the longest gap between successful sends (before the kill: the baseline; from the kill
on), counts sent / acknowledged / sent to the standby / received by the primary's consumer / lost /
received twice, CPU and load.

    .venv/bin/python bench/degradation.py --trials 3 --save bench/results/degradation.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
from pathlib import Path

from ferrymq.bench.degradation import degradation_trial
from ferrymq.bench.machine import machine_info


async def run(trials: int, rate: float, outage: float, root: Path) -> dict:
    results = []
    for i in range(trials):
        result = await degradation_trial(root / f"trial{i}", rate=rate, outage=outage)
        shutil.rmtree(root / f"trial{i}", ignore_errors=True)
        print(f"trial {i + 1}/{trials}: {json.dumps(result)}", flush=True)
        results.append(result)
    counts = ("sent", "acked", "failed", "to_standby", "received", "lost", "duplicates")
    total = {k: sum(r[k] for r in results) for k in counts}
    return {
        "summary": {
            "trials": trials,
            "longest_gap_s": max(r["longest_gap_from_kill_s"] for r in results),
            "longest_gap_before_kill_s": max(r["longest_gap_before_kill_s"] for r in results),
            **total,
            "rate_per_s": rate,
            "outage_s": outage,
            "producer_us_per_msg_median": sorted(r["producer_us_per_msg"] for r in results)[trials // 2],
            "relay_us_per_relayed_msg_median": sorted(r["relay_us_per_relayed_msg"] for r in results)[
                trials // 2
            ],
            "load_average_1m_at_kill": [r["load_average_1m_at_kill"] for r in results],
        },
        "trials": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--rate", type=float, default=200.0, help="messages a second")
    parser.add_argument("--outage", type=float, default=5.0, help="seconds the primary stays down")
    parser.add_argument("--save", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="degradation-") as tmp:
        report = asyncio.run(run(args.trials, args.rate, args.outage, Path(tmp)))
    report["machine"] = machine_info()
    report["command"] = (
        f"bench/degradation.py --trials {args.trials} --rate {args.rate:g} --outage {args.outage:g}"
    )
    print(json.dumps(report["summary"], indent=2))
    if args.save:
        args.save.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
