"""Event-loop lag probe for any Python process of a bench, without changing the process: put this
folder first on PYTHONPATH and set LOOP_PROBE_DIR. Every `asyncio.run` (uvloop's too) then runs a task
that sleeps 20 ms at a time and writes one JSON line a second to LOOP_PROBE_DIR/<script>-<args>-<pid>.jsonl:
the longest and the median overshoot of those sleeps (how long the loop's turns held it) and the
process's CPU (cores) over that second.

    LOOP_PROBE_DIR=/tmp/lag PYTHONPATH=bench/loop_probe:src:. .venv/bin/python bench/amqp_fairness.py ...
"""

from __future__ import annotations

import asyncio
import asyncio.runners
import json
import os
import sys
import time

SLEEP_S = 0.02
_run = asyncio.runners.Runner.run


async def _probe(where: str) -> None:
    name = "-".join(os.path.basename(a) for a in sys.argv[:2])
    lags: list[float] = []
    since, cpu_since = time.monotonic(), time.process_time()
    with open(os.path.join(where, f"{name}-{os.getpid()}.jsonl"), "a") as out:
        while True:
            started = time.monotonic()
            await asyncio.sleep(SLEEP_S)
            now = time.monotonic()
            lags.append(now - started - SLEEP_S)
            if now - since >= 1.0:
                cpu = time.process_time()
                lags.sort()
                line = {
                    "t": round(time.time(), 1),
                    "max_ms": round(lags[-1] * 1000, 1),
                    "p50_ms": round(lags[len(lags) // 2] * 1000, 1),
                    "turns": len(lags),
                    "cpu": round((cpu - cpu_since) / (now - since), 2),
                    "load": os.getloadavg()[0],
                }
                out.write(json.dumps(line) + "\n")
                out.flush()
                lags, since, cpu_since = [], now, cpu


def _probed_run(self, coro, **kwargs):
    where = os.environ.get("LOOP_PROBE_DIR")
    if not where:
        return _run(self, coro, **kwargs)

    async def probed():
        probe = asyncio.get_running_loop().create_task(_probe(where))
        try:
            return await coro
        finally:
            probe.cancel()

    return _run(self, probed(), **kwargs)


asyncio.runners.Runner.run = _probed_run  # type: ignore[method-assign]
