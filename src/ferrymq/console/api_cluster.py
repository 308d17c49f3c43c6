"""/api/cluster: broker groups, replicas and who is master; epochs and SyncStateSets when the
console knows the controllers; a broker's settings, read-only."""

from __future__ import annotations

from aiohttp import web

from ferrymq.console.web import answer, data, text

routes = web.RouteTableDef()


@routes.get("/api/cluster")
async def cluster(request: web.Request) -> web.Response:
    cluster = data(request)
    info = await cluster.admin.cluster_info()
    return answer({
        "namesrv": cluster.namesrv,
        "controllers": cluster.controllers,
        "clusters": info.cluster_addr_table,
        "groups": await cluster.brokers(),
    })  # fmt: skip


@routes.get("/api/cluster/settings")
async def settings(request: web.Request) -> web.Response:
    """?broker=host:port → its settings (GET_BROKER_CONFIG), passwords and secrets blanked."""
    return answer(await data(request).broker_settings(text(request, "broker")))
