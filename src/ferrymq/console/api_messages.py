"""/api/messages: look-ups by id, by key and by store time; a message's trace; dead letters of a
group, browsed and sent back."""

from __future__ import annotations

import time

from aiohttp import web

from ferrymq.console.web import BadInput, answer, body, data, message_view, number, text

routes = web.RouteTableDef()

MAX_BY_KEY = 64  # RocketMQ's dashboard caps key look-ups at 64 ...
MAX_BY_TIME = 2000  # ... and time ranges at 2,000 messages


@routes.get("/api/messages")
async def search(request: web.Request) -> web.Response:
    """?id=… [&topic=…], or ?topic=…&key=… [&begin&end], or ?topic=…&begin=…&end=… (ms)."""
    cluster = data(request)
    q = request.query
    if q.get("id"):
        found = [await cluster.admin.view_message(q["id"].strip(), topic=q.get("topic") or None)]
    else:
        topic = text(request, "topic")
        end = number(q, "end", int(time.time() * 1000) + 60_000)
        begin = number(q, "begin", 0)
        if begin > end:
            raise BadInput("begin is after end")
        if q.get("key"):
            key = q["key"]
            found = await cluster.admin.query_by_key(topic, key, begin=begin, end=end, max_num=MAX_BY_KEY)
        elif "begin" in q:
            found = await cluster.query_by_time(topic, begin, end, MAX_BY_TIME)
        else:
            raise BadInput("give id, or topic with key or with begin and end")
    return answer([message_view(m) for m in found])


@routes.get("/api/messages/{msg_id}/trace")
async def trace(request: web.Request) -> web.Response:
    found = await data(request).trace(request.match_info["msg_id"])
    return answer({
        "msgId": found.msg_id,
        "sends": found.sends,
        "stored": message_view(found.stored) if found.stored else None,
        "storedAt": found.stored_at,
        "transaction": found.transaction,
        "groups": list(found.groups.values()),
    })  # fmt: skip


@routes.get("/api/dlq/{group}")
async def dead_letters(request: web.Request) -> web.Response:
    limit = number(request.query, "limit", 200)
    found = await data(request).admin.dead_letters(request.match_info["group"], limit)
    return answer([message_view(m) for m in found])


@routes.post("/api/dlq/{group}/resend")
async def resend(request: web.Request) -> web.Response:
    ids = (await body(request)).get("ids")
    if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
        raise BadInput("ids must be a list of message ids (or absent for all)")
    sent = await data(request).admin.resend_dead_letters(request.match_info["group"], ids)
    return answer([{"msgId": m.msg_id, "newMsgId": r.msg_id, "topic": r.message_queue.topic}
                   for m, r in sent])  # fmt: skip
