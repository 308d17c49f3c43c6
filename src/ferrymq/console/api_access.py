"""/api/amqp and /api/access: the AMQP side from the metadata service (vhosts, exchanges, queues,
bindings, users), and what the cluster says of proxies and ACL."""

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
    """No broker answers ACL or proxy-listing requests yet: the page says so rather than guess."""
    return answer({
        "acl": {"enabled": False, "reason": "ACL not enabled: the brokers answer no ACL request yet"},
        "proxies": {"listed": False, "reason": "proxies register with no NameServer; none can be listed yet"},
    })  # fmt: skip
