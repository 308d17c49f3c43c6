"""Broker: the store, the managers and the processors, wired to one remoting server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from ferrymq import __version__
from ferrymq.broker.clients import ClientRegistry
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.consumption import ConsumptionControl
from ferrymq.broker.filters import FilterCache
from ferrymq.broker.groups import SubscriptionGroupManager
from ferrymq.broker.locks import RebalanceLockManager
from ferrymq.broker.long_polling import PullHoldService
from ferrymq.broker.offsets import ConsumerOffsetManager
from ferrymq.broker.processors.admin import AdminProcessor
from ferrymq.broker.processors.clients import ClientProcessor, notify_ids_changed
from ferrymq.broker.processors.consumers import ConsumerAdminProcessor
from ferrymq.broker.processors.offsets import OffsetProcessor
from ferrymq.broker.processors.pull import PullProcessor
from ferrymq.broker.processors.send import SendProcessor
from ferrymq.broker.processors.send_back import SendBackProcessor
from ferrymq.broker.processors.transaction import EndTransactionProcessor
from ferrymq.broker.registrar import NameServerRegistrar
from ferrymq.broker.schedule.scheduler import Scheduler
from ferrymq.broker.topics import TopicConfigManager
from ferrymq.broker.transactions import TransactionService
from ferrymq.net import Connection, RemotingClient, RemotingServer
from ferrymq.store import MessageStore, StoreError

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.hold = PullHoldService()
        self.clients = ClientRegistry()
        self.locks = RebalanceLockManager(config.rebalance_lock_max_live_time / 1000)
        self.filters = FilterCache(config.enable_property_filter)
        self.consumption = ConsumptionControl(self.clients)
        self.server = RemotingServer(config.listen_host, config.listen_port)
        self._tasks: list[asyncio.Task] = []
        self._registration: asyncio.Task | None = None
        self.started_at = time.time()
        self.stopped = False
        self._dispatch_scheduled = False
        for processor in (SendProcessor, PullProcessor, OffsetProcessor, ClientProcessor, AdminProcessor,
                          ConsumerAdminProcessor, SendBackProcessor, EndTransactionProcessor):  # fmt: skip
            processor(self).register(self.server)
        self.server.on_connection_closed(self._connection_closed)

    @property
    def is_master(self) -> bool:
        return self.config.broker_id == 0

    async def start(self) -> None:
        """Open (and recover) the store, then listen, then register with the NameServers."""
        config = self.config
        if config.listen_port == 0:
            config.listen_port = self.server.port = _free_port(config.listen_host)
        host, port = config.broker_addr.rsplit(":", 1)
        self.store = MessageStore(
            config.store, store_host=(host, int(port)), background_dispatch=False
        ).open()
        config_dir = config.store.config_dir
        self.topics = TopicConfigManager(
            config_dir, config.broker_name, config.broker_cluster_name, config.default_topic_queue_nums,
            config.auto_create_topic_enable,
        )  # fmt: skip
        self.offsets = ConsumerOffsetManager(config_dir)
        self.groups = SubscriptionGroupManager(config_dir, config.auto_create_subscription_group)
        for group in self.groups.groups.values():
            self.consumption.update(group)
        if config.trace_topic_enable:
            self.topics.ensure(config.msg_trace_topic_name, 1)
        self.transactions = TransactionService(self)
        self.transactions.load()
        self.hold.attach(asyncio.get_running_loop())
        self.scheduler = Scheduler(self)
        self.store.dispatcher.listener = self._arrived
        self.scheduler.start()
        await self.server.start()
        self.client = RemotingClient()
        self.registrar = NameServerRegistrar(self, self.client)
        await self.registrar.register_all()
        self._every(config.register_name_server_period / 1000, self.registrar.register_all)
        self._every(config.flush_consumer_offset_interval / 1000, self._persist_offsets)
        self._every(10.0, self._expire_clients)
        if self.is_master:
            self._every(config.transaction_check_interval / 1000, self.transactions.check)
        log.info(
            "broker %s listening on %s, store %s",
            config.broker_name,
            config.broker_addr,
            config.store.store_path_root_dir,
        )

    async def stop(self) -> None:
        """Stop cleanly: unregister, answer held pulls, close connections, flush and checkpoint."""
        self.stopped = True
        await self.scheduler.stop()
        for task in self._tasks:
            task.cancel()
        await self.registrar.unregister_all()
        self.hold.wake_all()
        self.consumption.close()
        await self.server.stop(grace=3.0)
        await self.client.close()
        self.transactions.write_ops()  # of transactions ended in the last loop turn
        self.offsets.persist()
        self.store.close()
        self.scheduler.save()
        log.info("broker %s stopped", self.config.broker_name)

    def _every(self, period: float, job) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(period)
                try:
                    await job()
                except Exception:
                    log.exception("periodic task %s failed", getattr(job, "__name__", job))

        self._tasks.append(asyncio.get_running_loop().create_task(loop()))

    def written(self) -> None:
        """After a put: dispatch once this loop turn is done (one pass serves every put before it)."""
        if not self._dispatch_scheduled:
            self._dispatch_scheduled = True
            asyncio.get_running_loop().call_soon(self._dispatch)

    def _dispatch(self) -> None:
        self._dispatch_scheduled = False
        try:
            self.store.dispatch()
        except StoreError:
            log.exception("dispatching stopped: the CommitLog needs recovery")

    def _arrived(self, queues: list[tuple[str, int]]) -> None:
        """The dispatcher's report of queues with new entries (thread-safe)."""
        self.hold.arrived(queues)
        self.scheduler.arrived(queues)

    def schedule_registration(self) -> None:
        """Tell the NameServers about a topic change soon (coalesced), not at the next period."""
        if self._registration is None or self._registration.done():
            self._registration = asyncio.get_running_loop().create_task(self.registrar.register_all())

    async def _persist_offsets(self) -> None:
        self.offsets.persist()

    async def _expire_clients(self) -> None:
        for group in self.clients.expire(self.config.channel_expired_timeout / 1000):
            self.notify_consumer_ids_changed(group)

    def _connection_closed(self, conn: Connection) -> None:
        for group in self.clients.drop_connection(conn):
            self.notify_consumer_ids_changed(group)

    def notify_consumer_ids_changed(self, group: str) -> None:
        if not self.config.notify_consumer_ids_changed_enable:
            return
        consumers = self.clients.consumers.get(group)
        if consumers and consumers.members:
            connections = [m.connection for m in consumers.members.values()]
            asyncio.get_running_loop().create_task(notify_ids_changed(connections, group))

    def runtime_info(self) -> dict[str, str]:
        store = self.store
        return {
            "brokerVersionDesc": f"ferrymq {__version__}",
            "commitLogMinOffset": str(store.commitlog.min_offset),
            "commitLogMaxOffset": str(store.commitlog.max_offset),
            "dispatchBehindBytes": str(store.commitlog.max_offset - store.dispatcher.offset),
            "bootTimestamp": str(int(self.started_at * 1000)),
            "runtime": f"{int(time.time() - self.started_at)} s",
            "pullHoldingCount": str(self.hold.waiting()),
            "diskFull": str(store.disk_full).lower(),
            **self.scheduler.runtime_info(),
            **self.transactions.stats(),
        }


def _free_port(host: str) -> int:
    """A port the OS says is free now (for `--listen host:0`)."""
    import socket

    with contextlib.closing(socket.socket()) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
