"""Slave acting master (RocketMQ 5's enableSlaveActingMaster), for classic master/slave groups.

While a group's master is down, its slave with the lowest broker id still alive takes over the
master's timed duties: it delivers the scheduled and timer messages that fall due, reading them
from its copy of the log, and checks back half transactions. It cannot write its own log (that is
the master's copy), so what it puts goes through the escape bridge to another master of the
cluster; its delivery progress advances in its own files.

Who acts is read from the NameServers (a master that dies is dropped from the routes as its
connection closes): a slave acts when its group lists no master, none of the slaves listed has a
lower id, and it has no live replication connection to a master.

Handing back: a returning master (with the same setting) delivers nothing until it has asked each
slave of its group for the duties (ACTING_MASTER_HANDBACK). A slave asked stops acting, waits for
the deliveries it is in the middle of, and answers its progress — delay-level offsets, timer
checkpoint, transactions it ended — which the master adopts before it starts. So a due message is
delivered by one of them, never by both, and none is left behind. The slave forgets none of it
until the master confirms (the same request with `confirm`) that it saved the progress and its op
records are on disk: a master that dies in between is handed the same duties back when it returns.

What the master did after the slave last copied its progress (every 10 s) is in the slave's copy of
its log: the redeliveries name the held-back records they came from (schedule/delivered.py), and
the op records the transactions it ended. The slave counts both before it delivers or checks
anything, so nothing the master delivered or ended is done again. Whether this slave acted, and the
transactions it ended, are kept in files, so a restart of the acting slave keeps them too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

import msgspec

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.escape import EscapeBridge
from ferrymq.broker.persisted import load_json, save_json
from ferrymq.broker.schedule.delay import DelayOffsetSerializeWrapper
from ferrymq.broker.schedule.scheduler import Scheduler
from ferrymq.broker.schedule.service import Escape
from ferrymq.broker.schedule.timer import TimerCheckpoint
from ferrymq.broker.transactions import TransactionService
from ferrymq.net import Connection, RemotingClient, RemotingError, RemotingServer
from ferrymq.protocol.bodies import Body, ClusterInfo, decode_body, encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)

CHECK_INTERVAL = 1.0  # seconds between two looks at the group's routes
HANDBACK_WAIT = 30.0  # seconds a handback waits for deliveries in progress to end
HOLD_AFTER_HANDBACK = 10.0  # seconds a slave that handed back does not act again (stale routes)
FLUSH_WAIT = 10.0  # seconds a master waits for the op records it adopted to be on disk
CONFIRM = "confirm"  # ACTING_MASTER_HANDBACK's field: the master has made the duties handed back its own


class Handback(Body):
    """A slave's answer to ACTING_MASTER_HANDBACK: whether it acted, and how far it got."""

    acted: bool = False
    delay_offsets: DelayOffsetSerializeWrapper | None = None
    timer: TimerCheckpoint | None = None
    ended_transactions: list[int] = msgspec.field(default_factory=list)


class ActingState(Body):
    """config/actingMaster.json: whether this slave acted since its master last took the duties back
    (its progress is then newer than the master's, and goes back with a handback)."""

    acted: bool = False


class BrokerRole(Protocol):
    @property
    def is_master(self) -> bool: ...

    @property
    def replicating(self) -> bool: ...


class ActingMaster:
    def __init__(
        self, config: BrokerConfig, role: BrokerRole, client: RemotingClient, scheduler: Scheduler,
        transactions: TransactionService, *, wake: Callable[[], None],
    ) -> None:  # fmt: skip
        """`wake()`: the scheduled-message services should look again (duties changed hands)."""
        self.config = config
        self.enabled = config.enable_slave_acting_master and not config.enable_controller_mode
        self.role = role
        self.client = client
        self.scheduler = scheduler
        self.transactions = transactions
        self.bridge = EscapeBridge(client, config.namesrv_addrs, config.broker_name)
        self._wake = wake
        self.acting = False
        self._state_path = config.store.config_dir / "actingMaster.json"
        # since the master last took the duties back (a slave with the setting turned off holds none)
        self.acted = self.enabled and load_json(self._state_path, ActingState).acted
        self.reclaimed = not self.enabled  # a master's duties are its own again
        self._hold_until = 0.0
        self._handed_back: list[int] = []  # transactions of the last answer, forgotten once confirmed

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.ACTING_MASTER_HANDBACK, self._handback)

    # --- What the broker asks -------------------------------------------------------------------

    def delivers(self) -> bool:
        """Whether this broker does the scheduled-message and check-back duties now."""
        return self.reclaimed if self.role.is_master else self.acting

    def escape(self) -> Escape | None:
        """Where redeliveries go: the escape bridge while acting for the master, else this log."""
        return self.bridge.redeliver if self.acting and not self.role.is_master else None

    def info(self) -> dict[str, str]:
        if not self.enabled:
            return {}
        return {"slaveActingMaster": str(self.acting).lower(), "escapedMessages": str(self.bridge.escaped)}

    # --- Periodic work --------------------------------------------------------------------------

    async def tick(self) -> None:
        if not self.enabled:
            return
        if self.role.is_master:
            if self.acting:  # promoted by hand while acting: its own log from now on
                await self._stop_acting("this broker is the master now")
            if not self.reclaimed:
                await self._reclaim()
            return
        self.reclaimed = False  # a master again one day, it asks its slaves first
        act = await self._should_act()
        if act and not self.acting:
            self.transactions.start_acting()
            self.scheduler.acting_started(self.config.slave_acting_undecided_timeout)
            self.acting = True
            self._set_acted(True)
            log.warning("master of %s is gone: this slave acts for it (scheduled messages, "
                        "transaction check-backs)", self.config.broker_name)  # fmt: skip
            self._wake()
        elif not act and self.acting:
            await self._stop_acting("the master is back")

    async def _should_act(self) -> bool:
        if time.monotonic() < self._hold_until or self.role.replicating:
            return False
        ids = await self._group_ids()
        if ids is None:
            return self.acting  # no NameServer answers: carry on as before
        me = self.config.broker_id
        return 0 not in ids and me in ids and me == min(ids)

    async def _group_ids(self) -> dict[int, str] | None:
        """The group's brokers as a NameServer lists them (id → address), None if none answers."""
        for namesrv in self.config.namesrv_addrs:
            try:
                response = await self.client.invoke(
                    namesrv, RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO), 3.0
                )
                if response.code == ResponseCode.SUCCESS:
                    info = decode_body(ClusterInfo, response.body)
                    data = info.broker_addr_table.get(self.config.broker_name)
                    return dict(data.broker_addrs) if data is not None else {}
            except (RemotingError, ProtocolError) as e:
                log.debug("no cluster info from %s: %s", namesrv, e)
        return None

    async def _stop_acting(self, why: str) -> None:
        self.acting = False
        deadline = time.monotonic() + HANDBACK_WAIT
        services = (self.scheduler.delays, self.scheduler.timer)
        while any(s.stepping for s in services) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        log.warning("%s: acting duties handed back (%d messages escaped)", why, self.bridge.escaped)

    # --- Handing back ---------------------------------------------------------------------------

    async def _handback(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        """A returning master asks for its duties: stop, and answer how far they got; or it confirms
        it made them its own: forget them."""
        if request.ext_fields.get(CONFIRM) == "true":
            if self.acting:  # it took the duties again meanwhile: the master asks for them again
                return request.make_response(ResponseCode.SYSTEM_ERROR, "acting for the master again")
            self._forget_duties()
            return request.make_response(ResponseCode.SUCCESS)
        if self.acting:
            self._hold_until = time.monotonic() + HOLD_AFTER_HANDBACK
            await self._stop_acting(f"master {connection.remote_address} asked")
        body = Handback(acted=self.acted)
        if self.acted:
            self._handed_back = sorted(self.transactions.acting_ended)
            body = Handback(True, self.scheduler.delays.offset_table(), self.scheduler.timer.checkpoint(),
                            self._handed_back)  # fmt: skip
        return request.make_response(ResponseCode.SUCCESS, body=encode_body(body))

    def _forget_duties(self) -> None:
        """The master has what was handed back: this slave's progress is its copy again."""
        self.transactions.forget_ended(self._handed_back)
        self._handed_back = []
        for service in (self.scheduler.delays, self.scheduler.timer):
            service.held.clear()
        self._set_acted(False)
        log.info("the master confirmed the duties handed back")

    def _set_acted(self, acted: bool) -> None:
        if acted != self.acted:
            self.acted = acted
            save_json(self._state_path, ActingState(acted))

    async def _reclaim(self) -> None:
        """Ask every slave of the group for the duties; start them once each answered (or is gone)."""
        ids = await self._group_ids()
        if ids is None:
            return  # no NameServer: try again next tick
        for broker_id, addr in sorted(ids.items()):
            if broker_id == 0:
                continue
            request = RemotingCommand(RequestCode.ACTING_MASTER_HANDBACK)
            try:
                response = await self.client.invoke(addr, request, HANDBACK_WAIT + 5.0)
                answer = (
                    decode_body(Handback, response.body) if response.code == ResponseCode.SUCCESS else None
                )
            except (RemotingError, ProtocolError) as e:
                log.info("slave %s did not hand back (%s): it is not acting either", addr, e)
                continue
            if answer is not None and answer.acted:
                await self._adopt(addr, answer)
                if not await self._confirm(addr):
                    return  # asked again next tick: the slave still holds what it handed back
        self.reclaimed = True
        log.info("master duties (scheduled messages, transaction check-backs) are this broker's")
        self._wake()

    async def _confirm(self, addr: str) -> bool:
        """Make what a slave handed back durable here, then tell it to forget it."""
        for service in (self.scheduler.delays, self.scheduler.timer):
            service.progress.save_now()
        commitlog = self.scheduler.store.commitlog
        end, deadline = commitlog.max_offset, time.monotonic() + FLUSH_WAIT
        while commitlog.flushed_offset < end:  # the op records of the transactions it ended
            if time.monotonic() > deadline:
                log.warning("op records not flushed in %.0f s: the handback is not confirmed yet", FLUSH_WAIT)
                return False
            await asyncio.sleep(0.01)
        request = RemotingCommand(RequestCode.ACTING_MASTER_HANDBACK, ext_fields={CONFIRM: "true"})
        try:
            response = await self.client.invoke(addr, request, HANDBACK_WAIT + 5.0)
        except (RemotingError, ProtocolError) as e:
            log.warning("slave %s did not take the confirmation (%s): asking again", addr, e)
            return False
        return response.code == ResponseCode.SUCCESS

    async def _adopt(self, addr: str, answer: Handback) -> None:
        if answer.delay_offsets is not None:
            self.scheduler.delays.adopt(answer.delay_offsets, handed_back=True)
        if answer.timer is not None:
            self.scheduler.timer.adopt(answer.timer, handed_back=True)
        await self.transactions.reclaim(answer.ended_transactions)
        log.warning("took the duties back from slave %s: timer %s, delay levels %s, %d transactions ended",
                    addr, msgspec.structs.asdict(answer.timer) if answer.timer else None,
                    answer.delay_offsets.offset_table if answer.delay_offsets else None,
                    len(answer.ended_transactions))  # fmt: skip
