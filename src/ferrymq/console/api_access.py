"""/api/amqp and /api/access: the AMQP side from the metadata service (vhosts, exchanges, queues,
bindings, users), and what the cluster says of proxies (ACL users and rules: api_acl)."""

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
    """Proxies register with no NameServer: the page says so rather than guess."""
    reason = "proxies register with no NameServer; none can be listed yet"
    return answer({"proxies": {"listed": False, "reason": reason}})
