"""MetaService: the metadata API a gateway (in process, or through the HTTP server) calls, with no
transport of its own. Store calls run in a worker thread so the event loop never waits on the
database; a watch long-polls the change log, woken at once by writes through this service and every
`poll_interval` for writes by other metadata servers sharing the database."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ferrymq.meta.access import verify_password
from ferrymq.meta.definitions import ImportReport, export_definitions, import_definitions
from ferrymq.meta.entities import Binding, Changes, Exchange, Permission, Policy, Queue, Snapshot, User, Vhost
from ferrymq.meta.store import MetaStore, Outcome

T = TypeVar("T")


class MetaService:
    def __init__(self, store: MetaStore, poll_interval: float = 1.0) -> None:
        self.store = store
        self.poll_interval = poll_interval
        self._changed = asyncio.Event()

    async def _read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))

    async def _write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a store write, then wake the watchers (also when it failed half-way: they re-read)."""
        try:
            return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))
        finally:
            self._changed.set()
            self._changed = asyncio.Event()

    # -- declarations (AMQP methods) ---------------------------------------------------------------

    async def declare_exchange(self, exchange: Exchange, passive: bool = False) -> Exchange:
        return await self._write(self.store.declare_exchange, exchange, passive)

    async def delete_exchange(self, vhost: str, name: str, if_unused: bool = False) -> None:
        await self._write(self.store.delete_exchange, vhost, name, if_unused)

    async def declare_queue(self, queue: Queue, passive: bool = False) -> Queue:
        return await self._write(self.store.declare_queue, queue, passive)

    async def delete_queue(self, vhost: str, name: str, owner: str | None = None) -> Queue | None:
        return await self._write(self.store.delete_queue, vhost, name, owner)

    async def delete_owned(self, owner: str) -> list[Queue]:
        return await self._write(self.store.delete_owned, owner)

    async def bind(self, binding: Binding, owner: str | None = None) -> Outcome:
        return await self._write(self.store.bind, binding, owner)

    async def unbind(self, binding: Binding, owner: str | None = None) -> None:
        await self._write(self.store.unbind, binding, owner)

    # -- administration ---------------------------------------------------------------------------

    async def put_vhost(self, vhost: Vhost) -> Outcome:
        return await self._write(self.store.put_vhost, vhost)

    async def delete_vhost(self, name: str) -> None:
        await self._write(self.store.delete_vhost, name)

    async def put_user(self, user: User) -> Outcome:
        return await self._write(self.store.put_user, user)

    async def delete_user(self, name: str) -> None:
        await self._write(self.store.delete_user, name)

    async def set_permission(self, permission: Permission) -> Outcome:
        return await self._write(self.store.set_permission, permission)

    async def delete_permission(self, user: str, vhost: str) -> None:
        await self._write(self.store.delete_permission, user, vhost)

    async def put_policy(self, policy: Policy) -> Outcome:
        return await self._write(self.store.put_policy, policy)

    async def delete_policy(self, vhost: str, name: str) -> None:
        await self._write(self.store.delete_policy, vhost, name)

    async def import_definitions(self, doc: dict[str, Any]) -> ImportReport:
        return await self._write(import_definitions, self.store, doc)

    # -- reads ------------------------------------------------------------------------------------

    async def export_definitions(self) -> dict[str, Any]:
        return await self._read(export_definitions, self.store)

    async def snapshot(self, vhost: str) -> Snapshot:
        return await self._read(self.store.snapshot, vhost)

    async def authenticate(self, username: str, password: str) -> User | None:
        """The user when the PLAIN password matches its stored hash, else None."""
        user = await self._read(self.store.user, username)
        if user is None or not verify_password(password, user.password_hash, user.hashing_algorithm):
            return None
        return user

    async def permission(self, user: str, vhost: str) -> Permission | None:
        return await self._read(self.store.permission, user, vhost)

    async def watch(self, scope: str, since: int, timeout: float = 0.0) -> Changes:
        """The changes of `scope` (a vhost, or CLUSTER_SCOPE for vhosts and users) after version
        `since`; waits up to `timeout` seconds for one when there is none yet."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            woken = self._changed
            found = await self._read(self.store.changes, scope, since)
            remaining = deadline - loop.time()
            if found.changes or found.reset or remaining <= 0:
                return found
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), min(remaining, self.poll_interval))
