"""Controller: one node of the Raft group, with the remoting server brokers and admins talk to.

The leader alone decides: it checks a request against the state, commits the resulting events through
Raft (one request at a time, so that each decision sees the previous one applied), then answers. It
also watches the brokers: a master whose connection closes or whose heartbeats stop is replaced by an
election, and the brokers of the set are told at once (NOTIFY_BROKER_ROLE_CHANGED), besides finding
out by their own periodic GET_REPLICA_INFO.
"""

from __future__ import annotations

import asyncio
import logging

from ferrymq.controller.config import ControllerConfig
from ferrymq.controller.liveness import LivenessTable
from ferrymq.controller.raft import CommitError, RaftGroup
from ferrymq.controller.state import Decision
from ferrymq.net import Connection, RemotingClient, RemotingError, RemotingServer
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.net.tls import client_context
from ferrymq.protocol.bodies import encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.controller import MasterInfoHeader, SyncStateSet
from ferrymq.protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)


class Controller:
    def __init__(self, config: ControllerConfig) -> None:
        from ferrymq.controller.processors import ControllerProcessor

        self.config = config
        self.liveness = LivenessTable(config.default_heartbeat_timeout / 1000)
        self.remoting = RemotingServer(config.listen_host, config.listen_port, tls=config.server_tls())
        self.remoting.on_connection_closed(self._connection_closed)
        ControllerProcessor(self).register_with(self.remoting)
        self.raft: RaftGroup | None = None
        self._client = RemotingClient(tls=client_context(config.client_tls()))
        self._write_lock = asyncio.Lock()
        self._tasks = BackgroundTasks("controller")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._was_leader = False
        self._caught_up = False  # this leader has applied every entry committed before its term
        self.elections = 0  # masters this node elected as leader (metrics)

    @property
    def port(self) -> int:
        return self.remoting.port

    @property
    def is_leader(self) -> bool:
        """The Raft leader, and caught up: only then may it answer from its state."""
        return self.raft is not None and self.raft.is_leader and self._caught_up

    async def start(self) -> None:
        self._loop = loop = asyncio.get_running_loop()
        await self.remoting.start()
        config = self.config
        config.listen_port = self.remoting.port
        others = [address for node, address in config.peers.items() if node != config.node_id]
        self.raft = await loop.run_in_executor(
            None,
            lambda: RaftGroup(
                config.peers[config.node_id],
                others,
                config.data_dir,
                self._leadership_maybe_changed,
                election_timeout=config.election_timeout,
                password=config.raft_password,
            ),
        )
        self._leadership_changed()
        self._spawn(self._announce_address())
        self._spawn(self._scan_loop())
        log.info("controller %s: remoting on %s, raft on %s", config.node_id, config.address,
                 config.peers[config.node_id])  # fmt: skip

    async def stop(self) -> None:
        await self.remoting.stop(grace=1.0)  # first: its handlers and closing connections may start tasks
        await self._tasks.close()
        await self._client.close()
        if self.raft is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.raft.close)

    def leader_address(self) -> str | None:
        """The remoting address of the Raft leader, when it is known."""
        if self.is_leader:
            return self.config.address
        assert self.raft is not None
        raft_leader = self.raft.leader
        node = next((n for n, a in self.config.peers.items() if a == raft_leader), None)
        if node is None:
            return None
        with self.raft.reading() as state:
            return state.controller_addresses.get(node)

    def leader_id(self) -> str | None:
        raft_leader = None if self.raft is None else self.raft.leader
        return next((n for n, a in self.config.peers.items() if a == raft_leader), None)

    # --- Decisions ----------------------------------------------------------------------------

    async def settle(self, decide) -> Decision:
        """On the leader: ``decide(state)``, then commit the decision's events; the decision, or why not."""
        if not self.is_leader:
            return Decision(ResponseCode.CONTROLLER_NOT_LEADER, self._not_leader_remark())
        assert self.raft is not None
        async with self._write_lock:
            with self.raft.reading() as state:
                decision: Decision = decide(state)
            if decision.events:
                try:
                    applied = await self.raft.commit(decision.events)
                except CommitError as exc:
                    return Decision(ResponseCode.CONTROLLER_NOT_LEADER, str(exc))
                if not all(applied):
                    return Decision(
                        ResponseCode.CONTROLLER_INVALID_REQUEST, "the state changed meanwhile: ask again"
                    )
        return decision

    async def decide(self, request: RemotingCommand, decide) -> RemotingCommand:
        """Answer a request that the leader must decide (see ``settle``)."""
        return self.answer(request, await self.settle(decide))

    def answer(self, request: RemotingCommand, decision: Decision) -> RemotingCommand:
        return request.make_response(
            decision.code,
            decision.remark,
            ext_fields=decision.header.to_ext_fields() if decision.header else None,
            body=encode_body(decision.body) if decision.body is not None else b"",
        )

    def not_leader(self, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.CONTROLLER_NOT_LEADER, self._not_leader_remark())

    def _not_leader_remark(self) -> str:
        leader = self.leader_address()
        return "this controller is not the leader: " + (
            f"the leader is {leader}" if leader else "none is elected"
        )

    def alive(self, name: str, broker_id: int) -> bool:
        return self.liveness.alive((name, broker_id))

    def standing(self, name: str, broker_id: int):
        return self.liveness.standing((name, broker_id))

    async def elect(self, name: str, broker_id: int = -1, designate: bool = False) -> Decision:
        """Run one election for ``name`` on the leader and notify the brokers when a master changed."""
        assert self.raft is not None
        unclean = self.config.enable_elect_unclean_master
        result = await self.settle(
            lambda state: state.elect_master(name, broker_id, designate, self.alive, self.standing, unclean)
        )
        if result.ok:
            assert isinstance(result.header, MasterInfoHeader)  # what an election answers with
            self.elections += 1
            log.info("broker set %s: broker %s elected master", name, result.header.master_broker_id)
            if self.config.notify_broker_role_changed:
                self.notify_role_changed(name)
        elif result.code != ResponseCode.CONTROLLER_MASTER_STILL_EXIST:
            log.warning("broker set %s: election failed: %s", name, result.remark)
        return result

    def notify_role_changed(self, name: str) -> None:
        """Tell every broker of the set who its master is now (oneway; polling covers a lost one)."""
        assert self.raft is not None
        with self.raft.reading() as state:
            found = state.sets.get(name)
            if found is None:
                return
            header = found.master_info()
            body = encode_body(SyncStateSet(set(found.sync_state_set), found.sync_state_set_epoch))
            addresses = list(found.addresses.values())
        ext = header.to_ext_fields()
        for address in addresses:
            command = RemotingCommand(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, ext_fields=dict(ext), body=body)
            self._spawn(self._notify(address, command))

    async def _notify(self, address: str, command: RemotingCommand) -> None:
        try:
            async with asyncio.timeout(3.0):
                await self._client.invoke_oneway(address, command)
        except (RemotingError, TimeoutError) as exc:
            log.info("cannot tell broker %s about its new role: %s (it will poll)", address, exc)

    def _spawn(self, coroutine) -> None:
        if self._tasks.closed:  # stopping: a late leadership change or closed connection starts nothing
            coroutine.close()
            return
        self._tasks.spawn(coroutine, name=coroutine.__qualname__)

    # --- Watching brokers ---------------------------------------------------------------------

    def _leadership_maybe_changed(self) -> None:
        """Called on pysyncobj's thread when this node's Raft state changes."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._leadership_changed)

    def _leadership_changed(self) -> None:
        if self.raft is None:  # still being made: start() looks once it is there
            return
        leader = self.raft.is_leader
        if leader and not self._was_leader:
            self._spawn(self._catch_up())
        if not leader:
            self._caught_up = False
        self._was_leader = leader

    async def _catch_up(self) -> None:
        """Commit a barrier in this term; once applied, the state holds every earlier commit."""
        assert self.raft is not None
        while self.raft.is_leader and not self._caught_up:
            try:
                await self.raft.commit([("barrier",)])
            except CommitError:
                await asyncio.sleep(0.1)
                continue
            if not self.raft.is_leader:
                return
            with self.raft.reading() as state:
                known = [((s.broker_name, b), a) for s in state.sets.values() for b, a in s.addresses.items()]
            self.liveness.grant_grace(known)
            self._caught_up = True
            log.info("controller %s is the leader now", self.config.node_id)

    def _connection_closed(self, connection: Connection) -> None:
        gone = self.liveness.connection_closed(connection)
        if gone and self.is_leader:
            log.info("brokers %s: connection closed", gone)
            self._spawn(self._reelect())

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.scan_not_active_broker_interval / 1000)
            gone = self.liveness.expire()
            if gone:
                log.info("brokers %s: heartbeats stopped", gone)
            if self.is_leader:
                try:
                    await self._reelect()
                except Exception:
                    log.exception("re-election scan failed")

    async def _reelect(self) -> None:
        assert self.raft is not None
        with self.raft.reading() as state:
            names = state.need_reelection(self.alive)
        for name in names:
            await self.elect(name)

    async def _announce_address(self) -> None:
        """Put this node's remoting address into the replicated state, so any node can name the leader's."""
        assert self.raft is not None
        while True:
            with self.raft.reading() as state:
                if state.controller_addresses.get(self.config.node_id) == self.config.address:
                    return
            try:
                await self.raft.commit([("controller_address", self.config.node_id, self.config.address)])
                return
            except CommitError:
                await asyncio.sleep(0.5)
