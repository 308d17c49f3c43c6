"""What the DLedger Raft core costs per entry, with no network: three nodes in one process.

The leader proposes batches of `--batch` bodies; every Ready is carried out at once (log written,
fsynced with `--fsync`, messages handed straight to the other nodes). The figure is committed
entries per second and CPU per entry for the whole group (three logs written), beside the cost of
writing the same entries to one log without Raft. `--wire` sends every message through the frame
codec (encode, join, decode), as a transport would. It bounds what DLedger mode can reach once the
broker drives the core over its transport.

    .venv/bin/python bench/dledger_core.py --entries 200000 --log file \
        --save bench/results/dledger-core-file.json
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

from ferrymq.bench.machine import machine_info, publish
from ferrymq.ha.dledger import wire
from ferrymq.ha.dledger.filelog import FileLog
from ferrymq.ha.dledger.log import Entry, MemoryLog
from ferrymq.ha.dledger.raft import HardState, RaftConfig, RaftNode, Role


def make_log(kind: str, root: Path) -> MemoryLog | FileLog:
    return FileLog(root) if kind == "file" else MemoryLog()


def run_group(args: argparse.Namespace, root: Path) -> dict:
    ids = ["n0", "n1", "n2"]
    cfg = RaftConfig(max_append_entries=args.max_append, max_inflight=args.inflight)
    nodes = {
        i: RaftNode(i, ids, make_log(args.log, root / i), HardState(), random.Random(i), cfg) for i in ids
    }
    leader = nodes["n0"]
    while leader.role is not Role.LEADER:
        leader.tick()
        pump(nodes, args.fsync, args.wire)
    body = os.urandom(args.size)
    base = leader.commit
    proposed = leader.log.last_index
    target = base + args.entries
    cpu, wall = time.process_time(), time.perf_counter()
    while leader.commit < target:
        while proposed - leader.commit < args.window and proposed < target:
            leader.propose([body] * args.batch)
            proposed += args.batch
        pump(nodes, args.fsync, args.wire)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    done = leader.commit - base
    return {
        "entries": done,
        "entries_per_s": round(done / wall),
        "cpu_us_per_entry": round(cpu / done * 1e6, 2),
    }


def pump(nodes: dict[str, RaftNode], fsync: bool, frames: bool = False) -> None:
    queue: deque = deque()
    while True:
        for node in nodes.values():
            if node.has_ready():
                rd = node.ready()
                if fsync and rd.unsynced_from is not None and isinstance(node.log, FileLog):
                    node.log.sync()
                queue.extend(rd.messages)
        if not queue:
            return
        while queue:
            m = queue.popleft()
            nodes[m.dst].step(wire.decode(b"".join(wire.encode(m))) if frames else m)


def run_plain(args: argparse.Namespace, root: Path) -> dict:
    log = make_log(args.log, root / "plain")
    body = os.urandom(args.size)
    cpu, wall = time.process_time(), time.perf_counter()
    for first in range(0, args.entries, args.batch):
        log.append([Entry(first + k, 1, body) for k in range(args.batch)])
        if args.fsync and isinstance(log, FileLog):
            log.sync()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    n = log.last_index + 1
    return {"entries": n, "entries_per_s": round(n / wall), "cpu_us_per_entry": round(cpu / n * 1e6, 2)}


def median(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda r: r["cpu_us_per_entry"])[len(runs) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--window", type=int, default=1024, help="proposed but not yet committed entries")
    ap.add_argument("--max-append", type=int, default=256)
    ap.add_argument("--inflight", type=int, default=8)
    ap.add_argument("--log", choices=("memory", "file"), default="file")
    ap.add_argument("--fsync", action="store_true")
    ap.add_argument("--wire", action="store_true", help="every message encoded and decoded as a frame")
    ap.add_argument("--runs", type=int, default=3, help="the figures are the median run by CPU per entry")
    ap.add_argument("--save", type=Path)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    groups, plains = [], []
    for _ in range(args.runs):  # alternating, so both see the same spells of a busy machine
        with tempfile.TemporaryDirectory(prefix="dledger-core-") as tmp:
            groups.append(run_group(args, Path(tmp)))
            plains.append(run_plain(args, Path(tmp)))
    group, plain = median(groups), median(plains)
    result = {
        "figure": "DLedger Raft core, 3 nodes in one process: committed entries/s and CPU per entry",
        "raft_group": group,
        "one_log_without_raft": plain,
        "runs": {"raft_group": groups, "one_log_without_raft": plains},
        "params": {k: v for k, v in vars(args).items() if k != "save"},
        "load_average_1m_at_start": round(load, 2),
        "machine": machine_info(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "command": "bench/dledger_core.py " + " ".join(sys.argv[1:]),
    }
    publish(result, args.save)


if __name__ == "__main__":
    main()
