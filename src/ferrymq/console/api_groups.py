"""/api/groups: every consumer group with its lag; create and delete one; one group's progress
per queue, connected members and controls; offset resets, pause/resume and rate limits."""

from __future__ import annotations

import re

from aiohttp import web

from ferrymq.console.web import BadInput, answer, body, data, number
from ferrymq.protocol.bodies import SubscriptionGroupConfig

routes = web.RouteTableDef()

_NAME = re.compile(r"^[%|a-zA-Z0-9_-]{1,255}$")  # RocketMQ's rule for group names


@routes.get("/api/groups")
async def groups(request: web.Request) -> web.Response:
    cluster = data(request)
    by_group: dict[str, dict] = {
        name: {"group": name, "topics": [], "lag": 0} for name in await cluster.group_names()
    }
    for g in await cluster.lags():
        row = by_group.setdefault(g.group, {"group": g.group, "topics": [], "lag": 0})
        row["topics"].append(g.topic)
        row["lag"] += g.lag
    return answer(sorted(by_group.values(), key=lambda r: (-r["lag"], r["group"])))


@routes.post("/api/groups")
async def create(request: web.Request) -> web.Response:
    """{group, retryMaxTimes=16, broadcast=true, orderly=false}: on every master."""
    args = await body(request)
    group = str(args.get("group", "")).strip()
    if not _NAME.match(group):
        raise BadInput(f"{group!r} is not a group name: 1-255 of letters, digits, %, |, _ and -")
    retries = number(args, "retryMaxTimes", 16)
    if not -1 <= retries <= 10_000:
        raise BadInput("retryMaxTimes must be between -1 and 10000")
    config = SubscriptionGroupConfig(
        group_name=group, retry_max_times=retries, consume_broadcast_enable=bool(args.get("broadcast", True)),
        consume_message_orderly=bool(args.get("orderly", False)),
    )  # fmt: skip
    await data(request).create_group(config)
    return answer({"group": group}, 201)


@routes.delete("/api/groups/{group}")
async def delete(request: web.Request) -> web.Response:
    """From every master; ?cleanOffsets=true also drops its committed offsets."""
    clean = request.query.get("cleanOffsets", "false").lower() in ("1", "true", "yes")
    await data(request).delete_group(request.match_info["group"], clean_offsets=clean)
    return answer({"deleted": request.match_info["group"]})


@routes.get("/api/groups/{group}")
async def detail(request: web.Request) -> web.Response:
    cluster = data(request)
    group = request.match_info["group"]
    return answer({
        "group": group,
        "progress": await cluster.progress(group),
        "consumers": await cluster.consumers(group),
        "controls": await cluster.admin.consumption_controls(group),
    })  # fmt: skip


@routes.post("/api/groups/{group}/reset")
async def reset(request: web.Request) -> web.Response:
    args = await body(request)
    topic = str(args.get("topic") or "")
    if not topic:
        raise BadInput("parameter 'topic' is required")
    cluster = data(request)
    offsets = await cluster.admin.reset_offset(request.match_info["group"], topic, number(args, "timestamp"))
    cluster.forget_lags()
    return answer([{"broker": q.broker_name, "queue": q.queue_id, "offset": o} for q, o in offsets.items()])


@routes.post("/api/groups/{group}/pause")
async def pause(request: web.Request) -> web.Response:
    await data(request).admin.pause(request.match_info["group"], _clients(await body(request)))
    return answer({"paused": request.match_info["group"]})


@routes.post("/api/groups/{group}/resume")
async def resume(request: web.Request) -> web.Response:
    await data(request).admin.resume(request.match_info["group"], _clients(await body(request)))
    return answer({"resumed": request.match_info["group"]})


@routes.post("/api/groups/{group}/rate-limit")
async def rate_limit(request: web.Request) -> web.Response:
    value = (await body(request)).get("perSecond")
    try:
        limit = float(value) if value not in (None, "", 0) else None
    except (TypeError, ValueError):
        raise BadInput(f"perSecond must be a number, got {value!r}") from None
    if limit is not None and limit <= 0:
        raise BadInput("perSecond must be above 0 (or empty for no limit)")
    await data(request).admin.set_rate_limit(request.match_info["group"], limit)
    return answer({"group": request.match_info["group"], "perSecond": limit})


def _clients(args: dict) -> list[str] | None:
    clients = args.get("clients") or []
    if not isinstance(clients, list) or not all(isinstance(c, str) for c in clients):
        raise BadInput("clients must be a list of client ids")
    return clients or None
