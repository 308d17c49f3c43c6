"""MetaClient: what a gateway uses to reach the metadata service over HTTP. It mirrors MetaService
(same calls, same records, the same MetaError with RabbitMQ's codes and texts), so a gateway can use
either."""

from __future__ import annotations

from typing import Any

import aiohttp
import msgspec

from ferrymq.meta.calls import CALLS
from ferrymq.meta.definitions import ImportReport
from ferrymq.meta.entities import Binding, Changes, Exchange, Permission, Queue, Snapshot, User
from ferrymq.meta.errors import MetaError


class MetaClient:
    def __init__(self, address: str, request_timeout: float = 10.0) -> None:
        """`address` is host:port of a metadata server."""
        self.base = f"http://{address}"
        self.request_timeout = request_timeout
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> MetaClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def call(self, name: str, /, *, wait: float = 0.0, **args: Any) -> Any:
        """Call `name` with `args`; the result typed as the call table says. `wait` extends the
        request timeout (for watches)."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        timeout = aiohttp.ClientTimeout(total=self.request_timeout + wait)
        async with self._session.post(
            f"{self.base}/api/meta/{name}", data=msgspec.json.encode(args), timeout=timeout
        ) as response:
            body = await response.read()
            if response.status == 400 and response.content_type == "application/json":
                error = msgspec.json.decode(body)["error"]
                raise MetaError.of(error["code"], error["text"])
            response.raise_for_status()
        return msgspec.json.decode(body, type=CALLS[name][1])

    async def declare_exchange(self, exchange: Exchange, passive: bool = False) -> Exchange:
        result: Exchange = await self.call("declare_exchange", exchange=exchange, passive=passive)
        return result

    async def delete_exchange(self, vhost: str, name: str, if_unused: bool = False) -> None:
        await self.call("delete_exchange", vhost=vhost, name=name, if_unused=if_unused)

    async def declare_queue(self, queue: Queue, passive: bool = False) -> Queue:
        result: Queue = await self.call("declare_queue", queue=queue, passive=passive)
        return result

    async def delete_queue(self, vhost: str, name: str, owner: str | None = None) -> Queue | None:
        result: Queue | None = await self.call("delete_queue", vhost=vhost, name=name, owner=owner)
        return result

    async def bind(self, binding: Binding, owner: str | None = None) -> str:
        result: str = await self.call("bind", binding=binding, owner=owner)
        return result

    async def unbind(self, binding: Binding, owner: str | None = None) -> None:
        await self.call("unbind", binding=binding, owner=owner)

    async def snapshot(self, vhost: str) -> Snapshot:
        result: Snapshot = await self.call("snapshot", vhost=vhost)
        return result

    async def authenticate(self, username: str, password: str) -> User | None:
        result: User | None = await self.call("authenticate", username=username, password=password)
        return result

    async def permission(self, user: str, vhost: str) -> Permission | None:
        result: Permission | None = await self.call("permission", user=user, vhost=vhost)
        return result

    async def watch(self, scope: str, since: int, timeout: float = 0.0) -> Changes:
        """Changes of `scope` after version `since`, waiting up to `timeout` s for one (long poll)."""
        result: Changes = await self.call("watch", wait=timeout, scope=scope, since=since, timeout=timeout)
        return result

    async def export_definitions(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.call("export_definitions")
        return result

    async def import_definitions(self, doc: dict[str, Any]) -> ImportReport:
        result: ImportReport = await self.call("import_definitions", doc=doc)
        return result
