"""Controller mode on a broker (RocketMQ's ReplicasManager): the controllers give the id and the role.

At start the broker takes a persistent id (GET_NEXT_BROKER_ID, APPLY_BROKER_ID, kept in
``<store>/.broker.meta``), registers, and becomes master or slave as the controllers say; when the set
has no master it asks to be elected. Then, every ``broker_heartbeat_interval``, it heartbeats to every
controller and asks the leader who the master is (a NOTIFY_BROKER_ROLE_CHANGED push is acted on at
once). A master forwards its HA service's SyncStateSet proposals as ALTER_SYNC_STATE_SET.

Fencing: a master acknowledges writes only while it holds a lease: a tick in which the controller
leader took its heartbeat and confirmed it as master of its epoch renews the lease for half the
heartbeat timeout from the tick's start. The controllers replace a master only after a full timeout
without heartbeats, so by then the old master has stopped acknowledging — whatever it still believes.
(A controller leader cut off from its quorum steps down within the Raft election timeout, 1.4 s, so
`controller_heart_beat_timeout_mills` must exceed twice that; RocketMQ's default 10 s does.)
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from ferrymq.broker.config import BrokerConfig
from ferrymq.ha.master import HAService
from ferrymq.net import Connection, RemotingClient, RemotingError, RemotingServer
from ferrymq.net.controllers import ControllerClient, parse_controller_addrs
from ferrymq.protocol.bodies import decode_body, encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.controller import (
    AlterSyncStateSetResponseHeader,
    GetNextBrokerIdResponseHeader,
    MasterInfoHeader,
    SyncStateSet,
)
from ferrymq.protocol.headers import BrokerHeartbeatRequestHeader
from ferrymq.protocol.remoting import RemotingCommand, RemotingProtocolError
from ferrymq.store import MessageStore
from ferrymq.store.files import atomic_write, durable_copies

log = logging.getLogger(__name__)

META_FILE = ".broker.meta"


class BrokerMeta(msgspec.Struct, rename="camel"):
    """This broker's id in its set, proved to the controllers by the check code on a re-apply."""

    cluster_name: str
    broker_name: str
    broker_id: int
    register_check_code: str


@dataclass(frozen=True)
class MasterView:
    """Who the controllers say the master is."""

    master_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


class RoleHost(Protocol):
    """The broker whose role the controllers decide."""

    @property
    def is_master(self) -> bool: ...

    async def change_role(
        self, role: str, *, broker_id: int, epoch: int, master_addr: str | None, master_ha_addr: str | None
    ) -> None: ...

    def schedule_registration(self) -> None: ...


class ReplicasManager:
    def __init__(
        self, config: BrokerConfig, store: MessageStore, ha: HAService, client: RemotingClient,
        host: RoleHost, *, every: Callable[[float, Callable[[], Awaitable[None]]], None],
        spawn: Callable[[Coroutine[Any, Any, Any], str], object],
    ) -> None:  # fmt: skip
        """`every(period, job)` and `spawn(coroutine, name)` run tasks that belong to the broker."""
        self.config = config
        self.store = store
        self.ha = ha
        self.client = client
        self.host = host
        self._every = every
        self._spawn = spawn
        self.controllers = ControllerClient(parse_controller_addrs(config.controller_addr), client)
        self.broker_id: int | None = None
        self.role: str | None = None  # "master" or "slave" once the controllers have said
        self.view = MasterView(None, None, 0, frozenset(), 0)
        self._lease_until = 0.0
        self._role_lock = asyncio.Lock()
        self._proposing = False
        self._master_ha_addr: str | None = None  # the HA address of the master this slave follows

    # --- What the broker asks -------------------------------------------------------------

    def write_refusal(self) -> str | None:
        """Why this broker must not acknowledge a write now; None when it may."""
        if self.role != "master" or not self.host.is_master:
            return f"broker is not the master of {self.config.broker_name} (controller mode)"
        if time.monotonic() >= self._lease_until:
            return "the master's lease from the controllers lapsed: it may have been replaced"
        return None

    # --- Start-up ---------------------------------------------------------------------------

    async def start(self, server: RemotingServer) -> None:
        """Take an id and a role before the broker registers with the NameServers."""
        server.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self._notified)
        await self._until_done("take a broker id", self._take_broker_id)
        await self._until_done("register with the controllers", self._register)
        self._every(self.config.broker_heartbeat_interval / 1000, self.tick)
        self.ha.on_sync_state_set_proposal(self._proposed)

    async def _until_done(self, what: str, step) -> None:
        """Retry ``step`` until it works: a broker in controller mode cannot serve without its controllers."""
        delay = 0.2
        while True:
            try:
                await step()
                return
            except (RemotingError, ControllerRefused) as exc:
                log.warning("cannot %s yet: %s (retrying in %.1f s)", what, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 3.0)

    async def _take_broker_id(self) -> None:
        config = self.config
        path = config.store.store_path_root_dir / META_FILE
        meta = _read_meta(path)
        ext = {"clusterName": config.broker_cluster_name, "brokerName": config.broker_name}
        if meta is None:
            answer = await self._call(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, ext)
            next_id = GetNextBrokerIdResponseHeader.from_ext_fields(answer.ext_fields).next_broker_id
            meta = BrokerMeta(
                config.broker_cluster_name, config.broker_name, int(next_id or 1),
                f"{config.broker_addr};{uuid.uuid4().hex}",
            )  # fmt: skip
        await self._call(
            RequestCode.CONTROLLER_APPLY_BROKER_ID,
            {**ext, "appliedBrokerId": str(meta.broker_id), "registerCheckCode": meta.register_check_code},
        )
        atomic_write(path, msgspec.json.encode(meta))
        self.broker_id = meta.broker_id
        log.info("broker %s has id %d in its set", config.broker_addr, meta.broker_id)

    async def _register(self) -> None:
        config = self.config
        await self._heartbeat()
        answer = await self._call(
            RequestCode.CONTROLLER_REGISTER_BROKER,
            {
                "clusterName": config.broker_cluster_name,
                "brokerName": config.broker_name,
                "brokerId": str(self.broker_id),
                "brokerAddress": config.broker_addr,
            },
        )
        view = _view(MasterInfoHeader.from_ext_fields(answer.ext_fields), answer.body)
        if view.master_id is None:
            await self.elect_self()
        else:
            await self.apply(view)

    async def elect_self(self) -> None:
        """Ask to become master (the set has none); whatever the answer, act on the result."""
        config = self.config
        response = await self.controllers.invoke(
            RequestCode.CONTROLLER_ELECT_MASTER,
            {"clusterName": config.broker_cluster_name, "brokerName": config.broker_name,
             "brokerId": str(self.broker_id)},
        )  # fmt: skip
        if response.code in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST):
            await self.apply(_view(MasterInfoHeader.from_ext_fields(response.ext_fields), response.body))
        else:
            log.info("not elected master: %s", response.remark)

    # --- Periodic work ------------------------------------------------------------------------

    async def tick(self) -> None:
        """Heartbeat every controller, then learn the master from the leader (and renew the lease)."""
        started = time.monotonic()
        heard_by = await self._heartbeat()
        try:
            answer = await self._call(
                RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": self.config.broker_name}
            )
        except (RemotingError, ControllerRefused) as exc:
            log.debug("no replica info this time: %s", exc)
            return
        view = _view(MasterInfoHeader.from_ext_fields(answer.ext_fields), answer.body)
        if view.master_id is None and self.view.master_epoch <= view.master_epoch:
            await self.elect_self()
            return
        await self.apply(view)
        if (
            self.controllers.leader in heard_by  # the leader that answered had heard from us since `started`
            and view.master_id == self.broker_id
            and view.master_epoch == self.view.master_epoch
        ):
            lease = self.config.controller_heart_beat_timeout_mills / 2000
            self._lease_until = max(self._lease_until, started + lease)

    async def _heartbeat(self) -> set[str]:
        """BROKER_HEARTBEAT to every controller; the ones that took it."""
        config = self.config
        store = self.store
        max_offset = store.commitlog.max_offset
        header = BrokerHeartbeatRequestHeader(
            cluster_name=config.broker_cluster_name,
            broker_addr=config.broker_addr,
            broker_name=config.broker_name,
            broker_id=self.broker_id,
            epoch=self.view.master_epoch,
            max_offset=max_offset,
            confirm_offset=max_offset,
            heartbeat_timeout_mills=config.controller_heart_beat_timeout_mills,
            election_priority=config.broker_election_priority,
        )
        return await self.controllers.invoke_all(RequestCode.BROKER_HEARTBEAT, header.to_ext_fields())

    # --- Roles --------------------------------------------------------------------------------

    async def apply(self, view: MasterView) -> None:
        """Take the role ``view`` gives this broker, unless it is older than what we know."""
        async with self._role_lock:
            broker_id = self.broker_id
            if broker_id is None or view.master_epoch < self.view.master_epoch:
                return  # no id taken yet (a notice came first): the registration applies the view
            host = self.host
            if view.master_id == broker_id:
                if self.role != "master" or view.master_epoch != self.view.master_epoch:
                    log.info("becoming master of %s at epoch %d", self.config.broker_name, view.master_epoch)
                    self._lease_until = (
                        time.monotonic() + self.config.controller_heart_beat_timeout_mills / 2000
                    )
                    await host.change_role(
                        "master", broker_id=broker_id, epoch=view.master_epoch, master_addr=None,
                        master_ha_addr=None,
                    )  # fmt: skip
                    self.role = "master"
                    host.schedule_registration()
                self._adopt_sync_state_set(view)
            elif view.master_id is not None and (
                self.role != "slave"
                or (view.master_id, view.master_epoch) != (self.view.master_id, self.view.master_epoch)
                or self._master_ha_addr is None  # the master did not answer last time: ask again
            ):
                name = self.config.broker_name
                log.info(
                    "following master %s of %s at epoch %d", view.master_address, name, view.master_epoch
                )
                self._lease_until = 0.0
                self.role = "slave"
                self._master_ha_addr = await self._ha_address_of(view.master_address)
                await host.change_role(
                    "slave",
                    broker_id=broker_id,
                    epoch=view.master_epoch,
                    master_addr=view.master_address,
                    master_ha_addr=self._master_ha_addr,
                )
                host.schedule_registration()
            self.view = view

    def _adopt_sync_state_set(self, view: MasterView) -> None:
        ours = (self.view.master_epoch, self.view.sync_state_set_epoch)
        if (view.master_epoch, view.sync_state_set_epoch) != ours:
            self.ha.set_sync_state_set(set(view.sync_state_set), view.sync_state_set_epoch)

    async def _ha_address_of(self, master_address: str | None) -> str | None:
        """The master's HA address, as it publishes it in its runtime info."""
        if master_address is None:
            return None
        try:
            response = await self.client.invoke(
                master_address, RemotingCommand(RequestCode.GET_BROKER_RUNTIME_INFO), 3.0
            )
            table = msgspec.json.decode(response.body).get("table", {})
        except (RemotingError, msgspec.DecodeError, AttributeError) as exc:
            log.warning("cannot ask master %s for its HA address: %s", master_address, exc)
            return None
        return table.get("haServerAddr")

    def _proposed(self, proposed: set[int]) -> None:
        """The HA service wants a new SyncStateSet: ask the controllers, then install their answer."""
        if self.role == "master" and not self._proposing:
            self._proposing = True
            self._spawn(self._alter(set(proposed)), "propose a SyncStateSet")

    async def _alter(self, proposed: set[int]) -> None:
        try:
            await self._propose(proposed)
        finally:
            self._proposing = False

    async def _propose(self, proposed: set[int]) -> None:
        view = self.view
        try:
            response = await self.controllers.invoke(
                RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                {"brokerName": self.config.broker_name, "masterBrokerId": str(self.broker_id),
                 "masterEpoch": str(view.master_epoch)},
                encode_body(SyncStateSet(proposed, view.sync_state_set_epoch)),
            )  # fmt: skip
        except RemotingError as exc:
            log.warning("cannot propose SyncStateSet %s: %s", sorted(proposed), exc)
            return
        if response.code != ResponseCode.SUCCESS:
            log.warning("SyncStateSet %s refused: %s", sorted(proposed), response.remark)
            return
        epoch = AlterSyncStateSetResponseHeader.from_ext_fields(response.ext_fields).new_sync_state_set_epoch
        async with self._role_lock:
            if self.view.master_epoch != view.master_epoch:
                return  # demoted meanwhile
            self.view = MasterView(
                view.master_id, view.master_address, view.master_epoch, frozenset(proposed), epoch
            )
            self.ha.set_sync_state_set(set(proposed), epoch)
        log.info("SyncStateSet of %s is now %s (epoch %d)", self.config.broker_name, sorted(proposed), epoch)

    async def _notified(self, connection: Connection, request: RemotingCommand) -> None:
        header = MasterInfoHeader.from_ext_fields(request.ext_fields)
        view = _view(header, request.body)
        log.info("controller says: master of %s is %s at epoch %s", self.config.broker_name,
                 view.master_id, view.master_epoch)  # fmt: skip
        self._spawn(self.apply(view), f"take the role of master epoch {view.master_epoch}")
        return None

    async def _call(self, code: int, ext: dict[str, str]) -> RemotingCommand:
        response = await self.controllers.invoke(code, ext)
        if response.code != ResponseCode.SUCCESS:
            raise ControllerRefused(f"request {code}: {response.remark} (code {response.code})")
        return response


class ControllerRefused(Exception):
    """The controller leader answered a request with an error code."""


def _view(header: MasterInfoHeader, body: bytes | memoryview) -> MasterView:
    sss = SyncStateSet()
    if body:
        try:
            sss = decode_body(SyncStateSet, body)
        except RemotingProtocolError:
            log.warning("controller sent a SyncStateSet that does not parse: %r", bytes(body[:100]))
    return MasterView(
        header.master_broker_id,
        header.master_address,
        header.master_epoch or 0,
        frozenset(sss.sync_state_set),
        header.sync_state_set_epoch if header.sync_state_set_epoch is not None else sss.sync_state_set_epoch,
    )


def _read_meta(path) -> BrokerMeta | None:
    for _, data in durable_copies(path):
        try:
            return msgspec.json.decode(data, type=BrokerMeta)
        except msgspec.DecodeError:
            continue
    return None
