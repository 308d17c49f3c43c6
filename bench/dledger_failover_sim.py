"""How long a simulated DLedger group of 3 takes to acknowledge appends again after its leader dies.

Each trial is a seeded cluster on a calm network (1-5 ms, nothing lost) with 100 ms ticks (each
node's clock 90-110 ms) and the default Raft settings (elections after 10-19 ticks, heartbeats every
2 ticks). After 5 s of client traffic the leader crashes; the figure is the simulated time until
the first append proposed afterwards is acknowledged. Clients send every 20-250 ms, which adds to
it. This is the Raft core's share of the "sends succeed again in <= 5 s p99" target; the broker's
share (clients finding the new master) comes on top once DLedger mode is wired.

    .venv/bin/python bench/dledger_failover_sim.py --trials 1000 \
        --save bench/results/dledger-failover-sim.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from tests.ha.dledger.sim import leader_failover

from ferrymq.bench.machine import machine_info, publish
from ferrymq.ha.dledger.raft import RaftConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--election-ticks", type=int, default=RaftConfig.election_ticks)
    ap.add_argument("--heartbeat-ticks", type=int, default=RaftConfig.heartbeat_ticks)
    ap.add_argument("--save", type=Path)
    args = ap.parse_args()
    config = RaftConfig(election_ticks=args.election_ticks, heartbeat_ticks=args.heartbeat_ticks)
    load = os.getloadavg()[0]
    started = time.monotonic()
    times = sorted(leader_failover(seed, config)[0] for seed in range(args.trials))
    q = statistics.quantiles(times, n=100, method="inclusive")
    result = {
        "figure": "simulated DLedger group of 3: leader crash to the next acknowledged append (ms)",
        "trials": len(times),
        "p50_ms": round(q[49]),
        "p90_ms": round(q[89]),
        "p99_ms": round(q[98]),
        "max_ms": times[-1],
        "tick_ms": "90-110",
        "election_ticks": args.election_ticks,
        "heartbeat_ticks": args.heartbeat_ticks,
        "wall_s": round(time.monotonic() - started, 1),
        "load_average_1m_at_start": round(load, 2),
        "machine": machine_info(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "command": "bench/dledger_failover_sim.py " + " ".join(sys.argv[1:]),
    }
    publish(result, args.save)


if __name__ == "__main__":
    main()
