"""Where one message's CPU goes: py-spy on the broker and on the client while `ferrymq bench`
sends single messages (1 or 64 in flight) or runs the end-to-end trip at a fixed rate, with the
samples summed by stage (remoting codec, network, send processor, put service, store, dispatch,
long polling, pull, the event loop, the SDK) and each stage's share turned into microseconds of CPU
per message with the process's CPU time from /proc.

    .venv/bin/python bench/profile_path.py [--scenario single1|single64|e2e] [--flush SYNC_FLUSH]
        [--seconds 10] [--save FILE]

--flush SYNC_FLUSH profiles a broker that acknowledges a send once it is fdatasync'd (group commit).
--gil samples only the thread holding the GIL: Python's own work, without time spent in the kernel
(which py-spy may otherwise charge to the Python line that made the call, or to the event loop).

py-spy samples wall time of running threads, so a thread waiting for a core on a loaded machine is
counted where it waits: read the per-stage microseconds (CPU time × share) beside the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from ferrymq.bench.client import cluster
from ferrymq.bench.machine import machine_info

# (stage, file path fragment): the first that matches a sampled frame names its stage
STAGES = [
    ("remoting codec", "ferrymq/protocol/remoting"),
    ("request headers", "ferrymq/protocol/headers"),
    ("message records", "ferrymq/protocol/record"),
    ("other protocol", "ferrymq/protocol/"),
    ("network (connections, dispatch of requests)", "ferrymq/net/"),
    ("send processor", "ferrymq/broker/processors/send"),
    ("pull processor", "ferrymq/broker/processors/pull"),
    ("other processors", "ferrymq/broker/processors/"),
    ("put service", "ferrymq/broker/services/put"),
    ("read service", "ferrymq/broker/services/read"),
    ("long polling", "ferrymq/broker/long_polling"),
    ("ConsumeQueue dispatch", "ferrymq/store/dispatch"),
    ("group commit", "ferrymq/store/flush"),
    ("group commit", "ferrymq/store/group_commit"),
    ("CommitLog and store", "ferrymq/store/"),
    ("other broker", "ferrymq/broker/"),
    ("replication", "ferrymq/ha/"),
    ("metrics", "ferrymq/metrics/"),
    ("SDK producer", "ferrymq/client/producer"),
    ("SDK consumers", "ferrymq/client/"),
    ("benchmark driver", "ferrymq/bench/"),
    ("event loop (asyncio, uvloop)", "asyncio/"),
]

TOPIC = "ProfilePath"
SCENARIOS = {
    "single1": ["produce", "--topic", TOPIC, "--batch", "1", "--inflight", "1", "--count", "10000000"],
    "single64": ["produce", "--topic", TOPIC, "--batch", "1", "--inflight", "64", "--count", "10000000"],
    "e2e": ["e2e", "--rate", "2000", "--duration", "600"],
}
E2E_RATE = 2000


def stage_of(frame: str) -> str:
    path = frame[frame.rfind("(") + 1 :]
    for stage, fragment in STAGES:
        if fragment in path:
            return stage
    return "other"


def breakdown(raw: Path) -> tuple[dict[str, int], list[tuple[str, int]], int]:
    """(samples by stage of the innermost frame of ours, top functions by own samples, all samples)
    of a py-spy raw (collapsed) file; frames outside ferrymq count for the nearest ferrymq caller."""
    stages: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        functions[frames[-1]] += n
        ours = next((f for f in reversed(frames) if "ferrymq/" in f), frames[-1])
        stages[stage_of(ours)] += n
    return dict(stages), functions.most_common(25), total


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def profile(scenario: str, seconds: float, work: Path, flush: str = "ASYNC_FLUSH", gil: bool = False) -> dict:
    with cluster(None, flush=flush) as target:
        assert target.broker_pid is not None
        client = subprocess.Popen(
            [sys.executable, "-m", "ferrymq", "bench", *SCENARIOS[scenario], "--namesrv", target.namesrv],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            time.sleep(3)  # routes, connections, warm caches
            pids = {"broker": target.broker_pid, "client": client.pid}
            before = {role: cpu_seconds(pid) for role, pid in pids.items()}
            stored_before = stored(target.namesrv, scenario)
            spy = [str(Path(sys.executable).with_name("py-spy")), "record", "-d", str(int(seconds)),
                   "-r", "200", "-f", "raw", "--nonblocking", *(["--gil"] if gil else [])]  # fmt: skip
            spies = {
                role: subprocess.Popen(
                    [*spy, "-p", str(pid), "-o", str(work / f"{role}.raw")],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for role, pid in pids.items()
            }
            started = time.monotonic()
            for spy in spies.values():
                spy.wait(seconds + 60)
            elapsed = time.monotonic() - started
            used = {role: cpu_seconds(pid) - before[role] for role, pid in pids.items()}
            if scenario == "e2e":
                messages = int(E2E_RATE * elapsed)
            else:
                messages = stored(target.namesrv, scenario) - stored_before
        finally:
            client.terminate()
            client.wait(30)
    result: dict = {
        "scenario": scenario,
        "flush_disk_type": flush,
        "gil_only": gil,
        "seconds": round(elapsed, 1),
        "messages_estimated": messages,
    }
    for role in ("broker", "client"):
        stages, top, total = breakdown(work / f"{role}.raw")
        cpu_us = used[role] / messages * 1e6 if messages else None
        result[role] = {
            "cpu_pct": round(used[role] / elapsed * 100, 1),
            "cpu_us_per_msg": round(cpu_us, 1) if cpu_us else None,
            "stages_us_per_msg": {
                stage: round(cpu_us * n / total, 2) if cpu_us else None
                for stage, n in sorted(stages.items(), key=lambda kv: -kv[1])
            },
            "top_functions_pct": [(name, round(100 * n / total, 1)) for name, n in top],
        }
    return result


def stored(namesrv: str, scenario: str) -> int:
    """Messages in the single-send scenarios' topic so far (0 for the e2e trip, which runs at a set rate)."""
    if scenario == "e2e":
        return 0
    from ferrymq.client import Admin

    async def count() -> int:
        async with Admin(namesrv) as admin:
            return sum(q.max_offset for q in (await admin.topic_stats(TOPIC)).values())

    return asyncio.run(count())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="single64")
    p.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH")
    p.add_argument("--gil", action="store_true", help="sample only the thread holding the GIL")
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--save", type=Path)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = profile(args.scenario, args.seconds, Path(tmp), args.flush, args.gil)
    result["machine"] = machine_info()
    print(json.dumps(result, indent=1))
    if args.save:
        args.save.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
