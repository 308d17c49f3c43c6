"""What a gateway knows of each vhost: a `Topology` loaded from the metadata service and kept
current by watching its change log, so that a declaration made through any gateway reaches every
other one. Listeners hear of queues that went away (their consumers are cancelled)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ferrymq.amqp.topology import Topology
from ferrymq.meta.client import MetaClient
from ferrymq.meta.entities import Change, Queue
from ferrymq.meta.service import MetaService
from ferrymq.net.tasks import BackgroundTasks

log = logging.getLogger(__name__)
Metadata = MetaService | MetaClient
WATCH_WAIT_S = 20.0  # how long one watch call waits for a change
RETRY_AFTER_S = 1.0  # after a failed watch


class VhostCatalog:
    def __init__(self, metadata: Metadata, tasks: BackgroundTasks) -> None:
        self.metadata = metadata
        self._tasks = tasks
        self._topologies: dict[str, Topology] = {}
        self._loading: dict[str, asyncio.Future[Topology]] = {}
        self._queue_gone: list[Callable[[Queue], None]] = []
        self._looks: dict[str, tuple[float, asyncio.Future[None]]] = {}  # by vhost: (begun, look)
        self._looked: dict[str, float] = {}  # by vhost: when the last look that succeeded began

    def on_queue_gone(self, listener: Callable[[Queue], None]) -> None:
        """Call `listener` with each queue deleted from any vhost this catalog watches."""
        self._queue_gone.append(listener)

    def known(self, vhost: str) -> Topology | None:
        """The vhost's topology if loaded (without waiting)."""
        return self._topologies.get(vhost)

    def loaded(self) -> list[Topology]:
        """The topologies of the vhosts loaded so far."""
        return list(self._topologies.values())

    async def get(self, vhost: str) -> Topology:
        """The vhost's topology, loaded (and watched from then on) on first use."""
        topology = self._topologies.get(vhost)
        if topology is not None:
            return topology
        loading = self._loading.get(vhost)
        if loading is None:
            loading = self._loading[vhost] = asyncio.ensure_future(self._load(vhost))
        try:
            return await asyncio.shield(loading)
        finally:
            if loading.done():
                self._loading.pop(vhost, None)

    async def _load(self, vhost: str) -> Topology:
        topology = Topology.from_snapshot(await self.metadata.snapshot(vhost))
        self._topologies[vhost] = topology
        self._tasks.spawn(self._watch(vhost), f"watch vhost {vhost}")
        return topology

    async def refresh(self, vhost: str) -> Topology:
        """Catch up with the metadata service now: after a declaration made through this gateway,
        its next method must see the result."""
        await self._catch_up(vhost, await self.get(vhost), 0.0)
        return self._topologies[vhost]

    async def current(self, vhost: str, since: float) -> Topology:
        """The vhost's topology as the metadata service had it at loop time `since` or later: with every
        declaration another gateway answered before then, which this gateway's watch may not have
        brought yet. One look begun at or after `since` serves every caller alike; with the metadata
        service away, the topology as known."""
        topology = await self.get(vhost)
        if self._looked.get(vhost, -1.0) >= since:
            return topology
        look = self._looks.get(vhost)
        if look is None or look[0] < since:
            begun = asyncio.get_running_loop().time()
            look = self._looks[vhost] = (begun, asyncio.ensure_future(self._look(vhost, begun)))
        try:
            await asyncio.shield(look[1])
        except Exception as e:
            log.warning("looking for changes of vhost %s: %s", vhost, e)
        return self._topologies[vhost]

    async def _look(self, vhost: str, begun: float) -> None:
        try:
            await self._catch_up(vhost, self._topologies[vhost], 0.0)
            self._looked[vhost] = max(begun, self._looked.get(vhost, begun))
        finally:
            if self._looks.get(vhost, (0.0, None))[1] is asyncio.current_task():
                del self._looks[vhost]

    async def _watch(self, vhost: str) -> None:
        while True:
            try:
                await self._catch_up(vhost, self._topologies[vhost], WATCH_WAIT_S)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the metadata service is away: keep the last view and retry
                log.warning("watching vhost %s: %s", vhost, e)
                await asyncio.sleep(RETRY_AFTER_S)

    async def _catch_up(self, vhost: str, topology: Topology, wait: float) -> None:
        changes = await self.metadata.watch(vhost, topology.version, wait)
        if changes.reset:
            fresh = self._topologies[vhost] = Topology.from_snapshot(await self.metadata.snapshot(vhost))
            gone = [q for q in topology.queues() if fresh.queue(q.name) is None]
            for queue in gone:
                self._tell_gone(queue)
            return
        for change in changes.changes:
            self._apply(topology, change)

    def _apply(self, topology: Topology, change: Change) -> None:
        if change.version <= topology.version:
            return  # seen already (a refresh and the watch may both bring it)
        gone = topology.queue(change.value.get("name", "")) if change.kind == "queue" else None
        topology.apply(change)
        if gone is not None and change.op == "delete":
            self._tell_gone(gone)

    def _tell_gone(self, queue: Queue) -> None:
        for listener in self._queue_gone:
            with contextlib.suppress(Exception):
                listener(queue)
