"""/api/amqp and /api/access: the AMQP side from the metadata service (vhosts, exchanges, queues,
bindings, users), and the gRPC proxies (ACL users and rules: api_acl)."""

from __future__ import annotations

from aiohttp import web

from ferrymq.console.web import answer, data

routes = web.RouteTableDef()


@routes.get("/api/amqp")
async def amqp(request: web.Request) -> web.Response:
    definitions = await data(request).definitions()
    if definitions is None:
        reason = "no metadata service given (ferrymq console --meta HOST:PORT)"
        return answer({"enabled": False, "reason": reason})
    return answer({"enabled": True, **{k: definitions.get(k, []) for k in
                   ("vhosts", "exchanges", "queues", "bindings", "users", "policies")}})  # fmt: skip


@routes.get("/api/access")
async def access(request: web.Request) -> web.Response:
    """The gRPC proxies the console was told of (they register with no NameServer), each probed."""
    cluster = data(request)
    if not cluster.proxies:
        reason = "no proxies given (ferrymq console --proxies HOST:PORT;HOST:PORT): they register nowhere"
        return answer({"proxies": {"listed": False, "reason": reason}})
    return answer({"proxies": {"listed": True, "nodes": await cluster.proxy_states()}})
