"""/api/acl: users and their ACL rules, when the cluster has authentication on.

Every change goes to every broker and NameServer of the cluster, as `ferrymq admin acl` sends it
(the SDK's AclAdmin), signed as the user the console was started with. Passwords are written, never
read back: the brokers do not send them and these answers would not carry them if they did.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ferrymq.console.web import BadInput, answer, body, data

routes = web.RouteTableDef()

ACTIONS = ("Pub", "Sub", "Create", "Update", "Delete", "Get", "List", "All")
USER_TYPES = ("Normal", "Super")
STATUSES = ("enable", "disable")
DECISIONS = ("Allow", "Deny")


@routes.get("/api/acl")
async def acl(request: web.Request) -> web.Response:
    cluster = data(request)
    if not await cluster.auth_enabled():
        reason = "ACL not enabled: the brokers do not check requests (auth_enabled is off)"
        return answer({"enabled": False, "reason": reason})
    users = await cluster.admin.list_users()
    rules = await cluster.admin.list_acls()
    return answer({
        "enabled": True,
        "actingAs": cluster.access_key,
        "users": [{"username": u.get("username"), "type": u.get("userType"), "status": u.get("userStatus")}
                  for u in users],
        "rules": [{"user": a["subject"].removeprefix("User:"), "resource": e["resource"],
                   "actions": e.get("actions") or [], "decision": e.get("decision"),
                   "sourceIps": e.get("sourceIps") or []}
                  for a in rules for p in a.get("policies") or [] for e in p.get("entries") or []],
    })  # fmt: skip


@routes.post("/api/acl/users")
async def create_user(request: web.Request) -> web.Response:
    args = await body(request)
    name, password = _required(args, "username"), _required(args, "password")
    user_type = _choice(args, "type", USER_TYPES) or "Normal"
    await data(request).admin.create_user(name, password, user_type=user_type)
    return answer({"created": name}, 201)


@routes.put("/api/acl/users/{user}")
async def update_user(request: web.Request) -> web.Response:
    args = await body(request)
    changes = {
        "password": str(args.get("password") or "") or None,
        "user_type": _choice(args, "type", USER_TYPES),
        "status": _choice(args, "status", STATUSES),
    }
    if not any(changes.values()):
        raise BadInput("give a new password, type or status")
    await data(request).admin.update_user(request.match_info["user"], **changes)
    return answer({"updated": request.match_info["user"]})


@routes.delete("/api/acl/users/{user}")
async def delete_user(request: web.Request) -> web.Response:
    await data(request).admin.delete_user(request.match_info["user"])
    return answer({"deleted": request.match_info["user"]})


@routes.post("/api/acl/rules")
async def create_rule(request: web.Request) -> web.Response:
    """{user, resources, actions, decision, sourceIps}: lists, or text separated by commas or spaces."""
    args = await body(request)
    user = _required(args, "user")
    resources = _words(args, "resources")
    actions = _words(args, "actions")
    if not resources or not actions:
        raise BadInput("give at least one resource and one action")
    unknown = [a for a in actions if a not in ACTIONS]
    if unknown:
        raise BadInput(f"unknown action(s) {', '.join(unknown)}: use {', '.join(ACTIONS)}")
    await data(request).admin.create_acl(
        user, resources, actions, decision=_choice(args, "decision", DECISIONS) or "Allow",
        source_ips=_words(args, "sourceIps"), update=bool(args.get("update")),
    )  # fmt: skip
    return answer({"user": user, "resources": resources}, 201)


@routes.delete("/api/acl/rules/{user}")
async def delete_rules(request: web.Request) -> web.Response:
    """The user's rules on `resource` (repeatable), or all of them when none is given."""
    resources = request.query.getall("resource", [])
    await data(request).admin.delete_acl(request.match_info["user"], resources or None)
    return answer({"user": request.match_info["user"], "resources": resources})


def _required(args: dict[str, Any], name: str) -> str:
    value = str(args.get(name) or "").strip()
    if not value:
        raise BadInput(f"parameter {name!r} is required")
    return value


def _choice(args: dict[str, Any], name: str, allowed: tuple[str, ...]) -> str | None:
    value = args.get(name) or None
    if value is not None and value not in allowed:
        raise BadInput(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _words(args: dict[str, Any], name: str) -> list[str]:
    value = args.get(name) or []
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadInput(f"{name} must be a list of text or text separated by commas")
    return [v.strip() for v in value if v.strip()]
