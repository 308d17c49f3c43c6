"""The metadata service over HTTP (aiohttp): POST /api/meta/<call> with the call's arguments as a JSON
object, answered by its result as JSON, or by 400 with {"error": {"code", "text"}} carrying the AMQP
reply code and RabbitMQ's text. GET/POST /api/definitions export and import RabbitMQ's format."""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from ferrymq.meta.calls import CALLS
from ferrymq.meta.errors import MetaError
from ferrymq.meta.service import MetaService


def _json(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(value), status=status, content_type="application/json")


class MetaServer:
    def __init__(self, service: MetaService, host: str, port: int) -> None:
        self.service = service
        self.host = host
        self.port = port
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/api/meta/{call}", self._call)
        app.router.add_get("/api/definitions", self._export)
        app.router.add_post("/api/definitions", self._import)
        # Gateways hold a watch open (a long poll of many seconds): stopping waits for none of them
        # beyond a moment (they ask another metadata server, or again once this one is back).
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)

    async def start(self) -> int:
        """Listen; the bound port (useful when asked for port 0)."""
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self.port
        return self.port

    async def close(self) -> None:
        await self._runner.cleanup()

    async def _call(self, request: web.Request) -> web.Response:
        name = request.match_info["call"]
        if name not in CALLS:
            raise web.HTTPNotFound(text=f"no call {name!r}")
        types, _ = CALLS[name]
        try:
            body = msgspec.json.decode(await request.read()) if request.can_read_body else {}
            args = {k: msgspec.convert(v, types[k]) for k, v in body.items() if k in types}
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        try:
            result = await getattr(self.service, name)(**args)
        except MetaError as exc:
            return _json({"error": {"code": exc.code, "text": exc.text}}, status=400)
        return _json(result)

    async def _export(self, _request: web.Request) -> web.Response:
        return _json(await self.service.export_definitions())

    async def _import(self, request: web.Request) -> web.Response:
        report = await self.service.import_definitions(msgspec.json.decode(await request.read()))
        return _json(report)
