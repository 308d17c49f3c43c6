"""The dashboard's figures over time: messages in and out per second and total lag.

Samples are taken when a page asks (at most one per SAMPLE_S, however many pages poll) and kept
for the last HISTORY samples, so a page opened later still draws the last minutes; a console
nobody looks at asks the cluster nothing.
"""

from __future__ import annotations

import asyncio
import itertools
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
                self.samples.append(Sample(int(time.time() * 1000), totals["put"], totals["get"], lag))
        points = list(self.samples)
        rates = [
            {"t": b.t, "lag": b.lag,
             "in": _rate(a.put, b.put, b.t - a.t), "out": _rate(a.get, b.get, b.t - a.t)}
            for a, b in itertools.pairwise(points)
        ]  # fmt: skip
        now = points[-1]
        return {"now": now, "rates": rates}


def _rate(before: int, after: int, ms: int) -> float:
    """Per second; a restarted broker (a counter going back) counts from zero."""
    return (after - before if after >= before else after) * 1000 / max(1, ms)


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
