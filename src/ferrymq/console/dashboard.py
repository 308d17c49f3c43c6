"""The dashboard's figures over time: messages in and out per second and total lag.

The rates are the brokers' own (runtime info's putTps and getTransferedTps over their last 10
seconds, summed over masters), so a restarted broker or a page opened late draws no false spike.
Samples are taken when a page asks (at most one per SAMPLE_S, however many pages poll) and kept
for the last HISTORY samples, so a page opened later still draws the last minutes; a console
nobody looks at asks the cluster nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ferrymq.console.cluster import ClusterData
from ferrymq.console.web import answer, data

SAMPLE_S = 2.0
HISTORY = 300


@dataclass(frozen=True)
class Sample:
    t: int  # ms since the epoch
    put: int  # messages stored since the masters started
    get: int
    lag: int  # over every group and topic
    put_tps: float  # messages stored per second, over the masters' last 10 s
    get_tps: float


class Sampler:
    def __init__(self) -> None:
        self.samples: deque[Sample] = deque(maxlen=HISTORY)
        self._lock = asyncio.Lock()

    async def series(self, cluster: ClusterData) -> dict[str, Any]:
        async with self._lock:
            last = self.samples[-1] if self.samples else None
            if last is None or time.time() * 1000 - last.t >= SAMPLE_S * 1000:
                totals = await cluster.totals()
                lag = sum(g.lag for g in await cluster.lags())
                now = Sample(int(time.time() * 1000), int(totals["put"]), int(totals["get"]), lag,
                             totals["inTps"], totals["outTps"])  # fmt: skip
                self.samples.append(now)
        points = list(self.samples)
        rates = [{"t": p.t, "lag": p.lag, "in": p.put_tps, "out": p.get_tps} for p in points]
        return {"now": points[-1], "rates": rates}


SAMPLER: web.AppKey[Sampler] = web.AppKey("sampler", Sampler)
routes = web.RouteTableDef()


@routes.get("/api/dashboard")
async def dashboard(request: web.Request) -> web.Response:
    cluster = data(request)
    series = await request.app[SAMPLER].series(cluster)
    lags = await cluster.lags()
    series["topics"] = len(await cluster.topics())
    series["groups"] = len({g.group for g in lags})
    series["top"] = sorted(lags, key=lambda g: -g.lag)[:10]
    return answer(series)
