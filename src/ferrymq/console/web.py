"""What every API module shares: JSON answers, typed query and body parameters with clear errors,
and the one place where cluster failures become HTTP statuses."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from aiohttp import web

from ferrymq.client import ClientError, MessageExt
from ferrymq.console.cluster import ClusterData
from ferrymq.net import RemotingError

log = logging.getLogger(__name__)

DATA: web.AppKey[ClusterData] = web.AppKey("data", ClusterData)


class BadInput(ValueError):
    """A request the console cannot act on: missing or malformed parameters (HTTP 400)."""


def data(request: web.Request) -> ClusterData:
    return request.app[DATA]


def answer(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(value), status=status, content_type="application/json")


def text(request: web.Request, name: str, default: str | None = None) -> str:
    """A query parameter; BadInput when it is required and missing."""
    value = request.query.get(name, default)
    if value is None or value == "":
        if default is not None:
            return default
        raise BadInput(f"parameter {name!r} is required")
    return value


def number(source: Any, name: str, default: int | None = None) -> int:
    """An integer parameter from the query or a JSON body."""
    value = source.get(name, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BadInput(f"parameter {name!r} must be an integer, got {value!r}") from None


async def body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object; BadInput when it is not one."""
    try:
        value = await request.json() if request.can_read_body else {}
    except ValueError:
        raise BadInput("the request body is not JSON") from None
    if not isinstance(value, dict):
        raise BadInput("the request body must be a JSON object")
    return value


def message_view(m: MessageExt) -> dict[str, Any]:
    """A stored message as the pages show it (the body as text, cut at 4 KiB)."""
    return {
        "topic": m.topic, "msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "queueId": m.queue_id,
        "queueOffset": m.queue_offset, "tags": m.tags, "keys": m.keys, "bornTimestamp": m.born_timestamp,
        "storeTimestamp": m.store_timestamp, "storeHost": "{}:{}".format(*m.store_host),
        "bornHost": "{}:{}".format(*m.born_host), "reconsumeTimes": m.reconsume_times,
        "properties": m.properties, "bodySize": len(m.body), "body": m.body[:4096].decode(errors="replace"),
    }  # fmt: skip


@web.middleware
async def errors(request: web.Request, handler) -> web.StreamResponse:
    """Failures as JSON {"error": ...}: bad input 400, unknown things 404, the cluster refusing or
    not answering 502, so every page can say what went wrong."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except BadInput as e:
        return answer({"error": str(e)}, 400)
    except LookupError as e:
        return answer({"error": str(e.args[0] if e.args else e)}, 404)
    except (ClientError, RemotingError, OSError, TimeoutError) as e:
        where = request.app[DATA].namesrv
        return answer({"error": f"cluster (NameServer {where}): {e or type(e).__name__}"}, 502)
    except Exception as e:
        log.exception("console request %s failed", request.path)
        return answer({"error": f"internal error: {type(e).__name__}: {e}"}, 500)
