"""Run the DLedger Raft simulation over many seeds and save how many broke a property.

Each seed is a whole cluster (3 or 5 nodes) driven through drops, delays, duplicates, reorders,
partitions, crashes (some between a write and its fsync), leadership transfers and client appends
on a fake clock; see tests/ha/dledger/sim.py for what is checked. Seeds are split over processes.
With `--files` the logs live in real files whose recovery runs at every restart (with
`--single-log`, DLedger's single log: entries in CommitLog segments); with `--wire` every message
travels as a frame (ferrymq.ha.dledger.wire).

    .venv/bin/python bench/dledger_sim.py --seeds 10000 --save bench/results/dledger-sim.json
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from collections import Counter
from functools import partial
from pathlib import Path

from tests.ha.dledger.sim import Violation, run_seed

from ferrymq.bench.machine import machine_info, publish


def one(seed: int, files: bool = False, wire: bool = False, single_log: bool = False) -> dict:
    started = time.process_time()
    try:
        with tempfile.TemporaryDirectory(prefix="dledger-sim-") as tmp:
            c = run_seed(seed, files=Path(tmp) if files else None, wire=wire, single_log=single_log)
    except Violation as e:
        return {"seed": seed, "violation": str(e), "cpu_s": time.process_time() - started}
    return {
        "seed": seed,
        "size": c.size,
        "stats": c.stats,
        "proposed": c.proposed,
        "acked": len(c.acked),
        "cpu_s": time.process_time() - started,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10_000)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--files", action="store_true", help="logs in real files (FileLog), recovered at restart")
    ap.add_argument(
        "--single-log",
        action="store_true",
        help="with --files: the logs in CommitLog segments (CommitLogRaftLog)",
    )
    ap.add_argument("--wire", action="store_true", help="every message encoded and decoded as a frame")
    ap.add_argument("--save", type=Path)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    started = time.monotonic()
    violations: list[dict] = []
    totals: Counter[str] = Counter()
    sizes: Counter[int] = Counter()
    cpu = 0.0
    done = 0
    seeds = range(args.first, args.first + args.seeds)
    with multiprocessing.Pool(args.workers) as pool:
        for r in pool.imap_unordered(
            partial(one, files=args.files, wire=args.wire, single_log=args.single_log), seeds, chunksize=50
        ):
            done += 1
            cpu += r["cpu_s"]
            if "violation" in r:
                violations.append({"seed": r["seed"], "violation": r["violation"]})
            else:
                sizes[r["size"]] += 1
                totals.update(r["stats"])
                totals.update(proposed=r["proposed"], acked=r["acked"])
            if done % 250 == 0 or done == len(seeds):
                rate = done / (time.monotonic() - started)
                print(
                    f"\r{done}/{len(seeds)} seeds, {len(violations)} violations, {rate:.0f} seeds/s",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    print(file=sys.stderr)
    result = {
        "figure": "DLedger Raft simulation: seeds run without a broken property",
        "logs": ("CommitLogRaftLog" if args.single_log else "FileLog") if args.files else "MemoryLog",
        "messages_as_frames": args.wire,
        "seeds_run": done,
        "first_seed": args.first,
        "violations": len(violations),
        "violation_details": sorted(violations, key=lambda v: v["seed"])[:50],
        "clusters_by_size": {str(k): v for k, v in sorted(sizes.items())},
        "totals": dict(totals),
        "wall_s": round(time.monotonic() - started, 1),
        "cpu_ms_per_seed": round(cpu / max(done, 1) * 1000, 2),
        "workers": args.workers,
        "load_average_1m_at_start": round(load, 2),
        "machine": machine_info(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "command": "bench/dledger_sim.py " + " ".join(sys.argv[1:]),
    }
    publish(result, args.save)
    sys.exit(1 if violations else 0)


if __name__ == "__main__":
    main()
