"""/api/topics: list, create, change (queues, permission), delete, route, per-queue status, the
groups reading a topic and their online members, a producer group's connections, and a test message
sent from the page."""

from __future__ import annotations

import re

from aiohttp import web

from ferrymq.console.web import BadInput, answer, body, data, number
from ferrymq.protocol.topic_names import AUTO_CREATE_TOPIC, OFFSET_MOVED_EVENT, SCHEDULE_TOPIC

routes = web.RouteTableDef()

_NAME = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")  # RocketMQ's rule for topic names
SYSTEM_TOPICS = (AUTO_CREATE_TOPIC, SCHEDULE_TOPIC, OFFSET_MOVED_EVENT)


def kind(topic: str, order: bool) -> str:
    """What the topics page filters by: retry, dead letters, system, ordered or normal."""
    if topic.startswith("%RETRY%"):
        return "retry"
    if topic.startswith("%DLQ%"):
        return "dlq"
    if topic.upper().startswith("RMQ_SYS_") or topic in SYSTEM_TOPICS:
        return "system"
    return "fifo" if order else "normal"


@routes.get("/api/topics")
async def topics(request: web.Request) -> web.Response:
    rows = []
    for name, brokers in sorted((await data(request).topics()).items()):
        first = next(iter(brokers.values()))
        rows.append({
            "topic": name, "brokers": sorted(brokers), "kind": kind(name, first.order), "perm": first.perm,
            "readQueues": sum(c.read_queue_nums for c in brokers.values()),
            "writeQueues": sum(c.write_queue_nums for c in brokers.values()),
        })  # fmt: skip
    return answer(rows)


@routes.post("/api/topics")
async def create(request: web.Request) -> web.Response:
    args = await body(request)
    topic = str(args.get("topic", "")).strip()
    if not _NAME.match(topic):
        raise BadInput(f"{topic!r} is not a topic name: 1-127 of letters, digits, %, |, _ and -")
    queues, perm = _queues_and_perm(args, 8, 6)
    await data(request).create_topic(topic, queues, order=bool(args.get("order")), perm=perm)
    return answer({"topic": topic, "queues": queues}, 201)


@routes.put("/api/topics/{topic}")
async def change(request: web.Request) -> web.Response:
    """{queues, perm}: a new queue count (read and write) and permission on every master that has
    the topic; what is not given stays as it is."""
    cluster, topic = data(request), request.match_info["topic"]
    current = (await cluster.topics()).get(topic)
    if not current:
        raise LookupError(f"topic {topic} does not exist")
    first = next(iter(current.values()))
    queues, perm = _queues_and_perm(await body(request), first.write_queue_nums, first.perm)
    await cluster.create_topic(topic, queues, order=first.order, perm=perm)
    return answer({"topic": topic, "queues": queues, "perm": perm})


def _queues_and_perm(args: dict, queues: int, perm: int) -> tuple[int, int]:
    queues, perm = number(args, "queues", queues), number(args, "perm", perm)
    if not 1 <= queues <= 1024:
        raise BadInput("queues must be between 1 and 1024")
    if perm not in (2, 4, 6):
        raise BadInput("perm must be 2 (write), 4 (read) or 6 (read and write)")
    return queues, perm


@routes.delete("/api/topics/{topic}")
async def delete(request: web.Request) -> web.Response:
    await data(request).delete_topic(request.match_info["topic"])
    return answer({"deleted": request.match_info["topic"]})


@routes.get("/api/topics/{topic}")
async def detail(request: web.Request) -> web.Response:
    cluster = data(request)
    topic = request.match_info["topic"]
    return answer({
        "topic": topic,
        "config": (await cluster.topics()).get(topic, {}),
        "route": await cluster.route(topic),
        "status": await cluster.topic_status(topic),
        "groups": [g for g in await cluster.lags() if g.topic == topic],
        "consumers": await cluster.topic_consumers(topic),
    })  # fmt: skip


@routes.get("/api/producers/{group}")
async def producers(request: web.Request) -> web.Response:
    """The producers of a producer group connected to the brokers (a producer names its group, not
    its topics, so the topic page asks by group, as RocketMQ's dashboard does)."""
    return answer(await data(request).producers(request.match_info["group"]))


@routes.post("/api/topics/{topic}/send")
async def send(request: web.Request) -> web.Response:
    args = await body(request)
    keys = [k for k in str(args.get("keys") or "").split() if k]
    result = await data(request).send(
        request.match_info["topic"], str(args.get("body", "")).encode(),
        tags=str(args["tags"]) if args.get("tags") else None, keys=keys,
    )  # fmt: skip
    return answer({
        "status": result.status.value, "msgId": result.msg_id, "offsetMsgId": result.offset_msg_id,
        "broker": result.message_queue.broker_name, "queueId": result.message_queue.queue_id,
        "queueOffset": result.queue_offset,
    })  # fmt: skip
