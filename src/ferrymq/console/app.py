"""The console's aiohttp application and the server that runs it.

The page is one HTML file with its script and style, served from this package's `static` folder:
nothing is fetched from elsewhere, so the console works on a machine with no internet.
"""

from __future__ import annotations

import logging
from importlib.resources import files
from pathlib import Path

from aiohttp import web

from ferrymq.console import api_access, api_acl, api_cluster, api_groups, api_messages, api_topics, dashboard
from ferrymq.console.cluster import ClusterData
from ferrymq.console.web import DATA, answer, errors

log = logging.getLogger(__name__)

STATIC = Path(str(files("ferrymq.console") / "static"))


async def _index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html")


async def _no_api(request: web.Request) -> web.Response:
    return answer({"error": f"no such API: {request.method} {request.path}"}, 404)


def make_app(cluster: ClusterData) -> web.Application:
    app = web.Application(middlewares=[errors])
    app[DATA] = cluster
    app[dashboard.SAMPLER] = dashboard.Sampler()
    for module in (api_cluster, api_topics, api_groups, api_messages, api_access, api_acl, dashboard):
        app.router.add_routes(module.routes)
    app.router.add_route("*", "/api/{rest:.*}", _no_api)
    app.router.add_static("/static", STATIC)
    app.router.add_get("/", _index)
    return app


class ConsoleServer:
    """The console on host:port (0: any free port), over the cluster `cluster` reads."""

    def __init__(self, cluster: ClusterData, host: str, port: int) -> None:
        self.cluster = cluster
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        runner = web.AppRunner(make_app(self.cluster), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = runner.addresses[0][1]
        log.info("console on http://%s:%d/", self.host, self.port)
        return self.port

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.cluster.close()
