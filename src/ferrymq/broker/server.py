"""Broker: the store, the managers and the processors, wired to one remoting server."""

from __future__ import annotations

import asyncio
import logging
import time

from ferrymq import __version__
from ferrymq.auth.persist import FILE_NAME as AUTH_FILE
from ferrymq.auth.serving import inner_credentials, serve_auth
from ferrymq.broker.acting_master import CHECK_INTERVAL as ACTING_CHECK_INTERVAL
from ferrymq.broker.acting_master import ActingMaster
from ferrymq.broker.clients import ClientRegistry
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.consumption import ConsumptionControl
from ferrymq.broker.escape import EscapeBridge
from ferrymq.broker.filters import FilterCache
from ferrymq.broker.groups import SubscriptionGroupManager
from ferrymq.broker.locks import RebalanceLockManager
from ferrymq.broker.long_polling import PullHoldService
from ferrymq.broker.offsets import ConsumerOffsetManager
from ferrymq.broker.pop import PopService
from ferrymq.broker.processors.admin import AdminProcessor
from ferrymq.broker.processors.broker_config import BrokerConfigProcessor
from ferrymq.broker.processors.client_calls import ClientCallProcessor
from ferrymq.broker.processors.clients import ClientProcessor, notify_ids_changed
from ferrymq.broker.processors.consumers import ConsumerAdminProcessor
from ferrymq.broker.processors.offsets import OffsetProcessor
from ferrymq.broker.processors.pop import PopProcessor
from ferrymq.broker.processors.pull import PullProcessor
from ferrymq.broker.processors.recall import RecallProcessor
from ferrymq.broker.processors.send import SendProcessor
from ferrymq.broker.processors.send_back import SendBackProcessor
from ferrymq.broker.processors.stats import StatsProcessor
from ferrymq.broker.processors.transaction import EndTransactionProcessor
from ferrymq.broker.quota import QuotaLimiter
from ferrymq.broker.quota.serving import FILE_NAME as QUOTA_FILE
from ferrymq.broker.quota.serving import ConnectionGuard, QuotaProcessor, load_quotas
from ferrymq.broker.registrar import NameServerRegistrar
from ferrymq.broker.replicas import ReplicasManager
from ferrymq.broker.runtime_stats import GroupRates, RuntimeStats, Totals, store_info
from ferrymq.broker.schedule.intents import INTENT_TOPIC, Intents
from ferrymq.broker.schedule.recall import RecallService
from ferrymq.broker.schedule.scheduler import Scheduler
from ferrymq.broker.services.put import PutService
from ferrymq.broker.services.read import ReadService
from ferrymq.broker.services.topic_admin import TopicAdmin
from ferrymq.broker.services.writer import MessageWriter
from ferrymq.broker.slave_sync import SlaveSynchronizer
from ferrymq.broker.stats_windows import Counts, StatsWindows
from ferrymq.broker.topics import TopicConfigManager
from ferrymq.broker.transactions import TransactionService
from ferrymq.ha.client import HAClient
from ferrymq.ha.dledger.apply import StoreApplier
from ferrymq.ha.dledger.node import DLedgerNode, NodeSettings
from ferrymq.ha.dledger.raft import RaftConfig
from ferrymq.ha.dledger.single import SingleLogNode, uses_single_log
from ferrymq.ha.master import HAService
from ferrymq.net import Connection, RemotingClient, RemotingServer
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.net.tls import client_context
from ferrymq.protocol.codes import Version
from ferrymq.store import MessageStore, StoreError
from ferrymq.store.entries import DLEDGER_DIR
from ferrymq.store.epoch import FILE_NAME as EPOCH_FILE
from ferrymq.store.epoch import EpochFile

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.hold = PullHoldService()
        self.clients = ClientRegistry()
        self.locks = RebalanceLockManager(config.rebalance_lock_max_live_time / 1000)
        self.filters = FilterCache(config.enable_property_filter)
        self.quotas = QuotaLimiter()
        self.consumption = ConsumptionControl(self.clients, self.quotas)
        self.server_tls = config.server_tls()  # the client port and the HA port share the files
        self.server = RemotingServer(config.listen_host, config.listen_port, tls=self.server_tls)
        self.tasks = BackgroundTasks(f"broker {config.broker_name}")
        self._registration: asyncio.Task | None = None
        self._register_again = False  # a change came while a registration was already on its way
        self.started_at = time.time()
        self.stopped = False
        self._dispatch_scheduled = False
        self.replicas: ReplicasManager | None = None  # controller mode
        # "master" takes writes and serves replicas; "slave" copies its master and refuses writes.
        # In controller mode a broker waits as a slave until the controller gives it a role.
        # In DLedger mode every member starts as a slave; Raft's leader becomes the master.
        starts_as_slave = config.broker_role == "SLAVE" or config.enable_controller_mode
        self.role = "slave" if starts_as_slave or config.enable_dledger_commit_log else "master"
        self.dledger: DLedgerNode | None = None
        self.epoch = 0  # the master epoch this broker last heard of
        self.ha_client: HAClient | None = None
        self._role_lock = asyncio.Lock()
        self.server.on_connection_closed(self._connection_closed)

    @property
    def is_master(self) -> bool:
        return self.role == "master"

    def fenced(self) -> str | None:
        """Why a master must not acknowledge writes now (controller mode: its lease lapsed); else None."""
        return None if self.replicas is None else self.replicas.write_refusal()

    @property
    def serves_reads(self) -> bool:
        """A slave serves pulls with slave_read_enable (RocketMQ), and in any case while it has no live
        master to send consumers to (so they read on when the master is gone)."""
        if self.is_master or self.config.slave_read_enable:
            return True
        return self.ha_client is None or not self.ha_client.connected

    @property
    def registered_id(self) -> int:
        """The id NameServers list this broker under: 0 for the master (as RocketMQ), else its own."""
        return 0 if self.is_master else self.config.broker_id

    @property
    def waits_for_replicas(self) -> bool:
        """Sends are acknowledged only once replicated (SYNC_MASTER; controller masters are SYNC_MASTER;
        with a replication QoS level, level 2 while its state says so). A DLedger master's sends wait
        for their Raft commit instead."""
        config = self.config
        if config.enable_dledger_commit_log:
            return False
        if config.replication_qos_level >= 0:
            return self.is_master and config.replication_qos_level == 2
        return self.is_master and (config.enable_controller_mode or config.broker_role == "SYNC_MASTER")

    async def start(self) -> None:
        """Open (and recover) the store, then listen, then register with the NameServers."""
        config = self.config
        ephemeral = config.listen_port == 0
        if ephemeral:  # the address goes into every stored record: take the port first
            config.listen_port = self.server.bind()
        host, port = config.broker_addr.rsplit(":", 1)
        loop = asyncio.get_running_loop()
        self.store = MessageStore(
            config.store, store_host=(host, int(port)), background_dispatch=False
        ).open()
        self.store.replica = not self.is_master
        self.client_tls = client_context(config.client_tls())  # to NameServers, controllers, master, peers
        if config.enable_dledger_commit_log:
            self.dledger = self._dledger_node(uses_single_log(config.store.store_path_root_dir / DLEDGER_DIR))
        self.writer = MessageWriter(self.store, self.dledger, config.store.sync_flush_timeout / 1000)
        config_dir = config.store.config_dir
        self.topics = TopicConfigManager(
            config_dir, config.broker_name, config.broker_cluster_name, config.default_topic_queue_nums,
            config.auto_create_topic_enable, config.auto_create_hold_after_delete / 1000,
        )  # fmt: skip
        self.offsets = ConsumerOffsetManager(config_dir)
        self.groups = SubscriptionGroupManager(config_dir, config.auto_create_subscription_group)
        self.consumption.update_all(self.groups.groups.values())
        load_quotas(self.quotas, config_dir / QUOTA_FILE)
        self.epochs = EpochFile(config.store.store_path_root_dir / EPOCH_FILE)
        # retention runs on the store's thread; epochs change on the loop
        self.store.retention.listener = lambda low: loop.call_soon_threadsafe(self.epochs.trim_below, low)
        if config.trace_topic_enable:
            self.topics.ensure(config.msg_trace_topic_name, 1)
        self.scheduler = Scheduler(
            config.store, self.store, self.topics, put=self.writer.put, written=self.written,
            active=lambda: self.acting_master.delivers(),
        )  # fmt: skip
        self.transactions = TransactionService(
            config, self.store, self.topics, self.offsets, self.clients, divert=self.scheduler.divert,
            put=self.writer.put, written=self.written, topics_changed=self.schedule_registration,
        )  # fmt: skip
        self.transactions.load()
        self.ha = HAService(
            config, self.store, self.epochs, lambda: self.waits_for_replicas, tls=self.server_tls
        )
        self._serve()
        self.auth = serve_auth(
            self.server, config_dir / AUTH_FILE, enabled=config.auth_enabled,
            init_username=config.init_username, init_password=config.init_password,
        )  # fmt: skip
        QuotaProcessor(self.quotas, config_dir / QUOTA_FILE).register(self.server)
        self.server.add_guard(ConnectionGuard(self.quotas))
        credentials = inner_credentials(*config.inner_credentials)
        self.client = RemotingClient(tls=self.client_tls, signer=credentials.sign if credentials else None)
        self.registrar = NameServerRegistrar(
            config, self.topics, self, self.client, self.master_ha_addr_learned
        )
        self.acting_master = ActingMaster(
            config, self, self.client, self.scheduler, self.transactions, wake=self.scheduler.wake
        )
        self.acting_master.register(self.server)
        self.scheduler.escape_by(self.acting_master.escape)
        if self.acting_master.enabled:
            self.topics.ensure(INTENT_TOPIC, 1)
            intents = Intents(
                self.writer.put, self.written, self.ha.replica_acks, config.slave_acting_intent_timeout / 1000
            )
            self.scheduler.intend_by(intents.deliveries)
            self.transactions.intend_by(intents.record)
        self.slave_sync = SlaveSynchronizer(
            self.store, self.topics, self.offsets, self.groups, self.consumption, self.scheduler, self.client,
            is_master=lambda: self.is_master, learned_master=lambda: self.registrar.master_addr,
            acted=lambda: self.acting_master.acted,
        )  # fmt: skip
        self.hold.attach(loop)
        self.store.dispatcher.listener = self._arrived
        self.scheduler.start()
        config.ha_listen_port = await self._start_ha(ephemeral)
        # Roles come from the controller in controller mode, from Raft's election in DLedger mode.
        if not config.enable_controller_mode and not config.enable_dledger_commit_log:
            if self.is_master:  # a static master keeps its epoch across restarts
                await self.change_role(
                    "master",
                    broker_id=0,
                    epoch=max(self.epochs.last_epoch, 1),
                    master_addr=None,
                    master_ha_addr=None,
                )
            elif config.ha_master_address:
                self.master_ha_addr_learned(config.ha_master_address)
        await self.pops.start()
        await self.server.start()
        if self.dledger is not None:
            await self.dledger.start()
        if config.enable_controller_mode and config.controller_addr:  # without: roles come by change_role
            self.replicas = ReplicasManager(
                config, self.store, self.ha, self.client, self, every=self._every, spawn=self._spawn
            )
            await self.replicas.start(self.server)
        if self.registrar.address_service is not None:  # the NameServer list comes from there
            await self.registrar.address_service.refresh()
            self._every(config.namesrv_addr_poll_interval / 1000, self.registrar.follow_address_service)
        await self.registrar.register_all()
        self._every(config.register_name_server_period / 1000, self.registrar.register_all)
        self._every(config.flush_consumer_offset_interval / 1000, self._persist_offsets)
        self._every(10.0, self._expire_clients)
        self._every(1.0, self._sample_stats)
        self._every(10.0, self._sample_group_rates)
        self._every(config.slave_sync_interval / 1000, self.slave_sync.sync)
        self._every(config.transaction_check_interval / 1000, self._check_transactions)
        if self.acting_master.enabled:
            self._every(ACTING_CHECK_INTERVAL, self.acting_master.tick)
        log.info(
            "broker %s listening on %s, store %s",
            config.broker_name,
            config.broker_addr,
            config.store.store_path_root_dir,
        )

    def _serve(self) -> None:
        """The messaging services, and the remoting processors over them and the managers."""
        config, store, topics, groups = self.config, self.store, self.topics, self.groups
        changed = self.schedule_registration
        self.puts = PutService(
            config, store, topics, groups, self, divert=self.scheduler.divert, half=self.transactions.half,
            replicated=self.ha.wait_replicated, written=self.written, topics_changed=changed,
            writer=self.writer, quotas=self.quotas,
        )  # fmt: skip
        self.recalls = RecallService(self.puts)
        self.topic_admin = TopicAdmin(topics, store, self.offsets, changed)
        self.reads = ReadService(
            config, store, topics, groups, self.offsets, self.clients, self.filters, self.consumption,
            self.hold, self,
        )  # fmt: skip
        self.pops = PopService(
            store=store, topics=topics, groups=groups, offsets=self.offsets, hold=self.hold,
            filters=self.filters, consumption=self.consumption, broker_name=config.broker_name,
            cluster_name=config.broker_cluster_name, config_dir=config.store.config_dir,
            submit=self.writer.submit, written=self.written, replicate=self.ha.written, topic_created=changed,
        )  # fmt: skip
        self.group_rates = GroupRates(self._delivered)
        self.stats_windows = StatsWindows(self._stats_counts)
        processors = (
            SendProcessor(self.puts, config.region_id, config.trace_on),
            PullProcessor(self.reads),
            PopProcessor(self.pops, lambda: config.broker_permission),
            OffsetProcessor(self.reads, self.offsets, store),
            ClientProcessor(topics, groups, self.clients, self.filters, self.locks, topics_changed=changed,
                            members_changed=self.notify_consumer_ids_changed),
            AdminProcessor(config.broker_cluster_name, topics, groups, self.offsets, store, self.consumption,
                           self.topic_admin, runtime_info=self.runtime_info,
                           mixed_message_type=config.enable_mixed_message_type),
            ConsumerAdminProcessor(config.broker_name, topics, self.offsets, store, self.clients),
            StatsProcessor(config.broker_name, topics, groups, self.offsets, store, self.clients,
                           self.reads.pulled, self.group_rates.rate, self.stats_windows),
            BrokerConfigProcessor(config, self._settings_changed),
            ClientCallProcessor(self.clients, store),
            SendBackProcessor(self.puts, self.scheduler),
            RecallProcessor(self.recalls),
            EndTransactionProcessor(self.transactions, self, self._acting_bridge),
        )  # fmt: skip
        for processor in processors:
            processor.register(self.server)
        self.stats = RuntimeStats(self._totals)

    def _totals(self) -> Totals:
        reads = self.reads
        return Totals(
            put=self.puts.stored.total()[0],
            got=reads.delivered.total()[0] + self.pops.delivered.total()[0],
            found=reads.reads_found,
            missed=reads.reads_missed,
        )

    def _settings_changed(self) -> None:
        """After an admin changed settings: pass on the ones copied at start, register again (a
        permission change shows in the routes)."""
        self.filters.enable_property_filter = self.config.enable_property_filter
        self.transactions.timeout_ms = self.config.transaction_timeout
        self.topics.touch()
        self.schedule_registration()

    def _delivered(self) -> dict[tuple[str, str], int]:
        """Messages delivered so far by (topic, group), pulled and popped."""
        counts = {key: messages for key, messages, _ in self.reads.delivered.items()}
        for key, messages, _ in self.pops.delivered.items():
            counts[key] = counts.get(key, 0) + messages
        return counts

    async def _sample_stats(self) -> None:
        self.stats.sample()

    def _stats_counts(self) -> Counts:
        """RocketMQ's stats items from the tallies: puts by topic, gets by "topic@group", the broker's."""
        stored = self.puts.stored.items()
        delivered: dict[str, list[int]] = {}
        for tally in (self.reads.delivered, self.pops.delivered):
            for (topic, group), messages, size in tally.items():
                counts = delivered.setdefault(f"{topic}@{group}", [0, 0])
                counts[0] += messages
                counts[1] += size
        cluster = self.config.broker_cluster_name
        return {
            "TOPIC_PUT_NUMS": {topic: messages for topic, messages, _ in stored},
            "TOPIC_PUT_SIZE": {topic: size for topic, _, size in stored},
            "GROUP_GET_NUMS": {key: c[0] for key, c in delivered.items()},
            "GROUP_GET_SIZE": {key: c[1] for key, c in delivered.items()},
            "BROKER_PUT_NUMS": {cluster: sum(messages for _, messages, _ in stored)},
            "BROKER_GET_NUMS": {cluster: sum(c[0] for c in delivered.values())},
        }

    async def _sample_group_rates(self) -> None:
        self.group_rates.sample()
        self.stats_windows.tick()

    async def _start_ha(self, ephemeral: bool) -> int:
        """Listen for replicas on ha_listen_port; by default on the listen port + 1 (RocketMQ), or on
        any free port when that is taken or the listen port was ephemeral: replicas learn the HA
        address from the NameServers anyway."""
        config = self.config
        if config.ha_listen_port >= 0:
            return await self.ha.start(config.listen_host, config.ha_listen_port)
        if not ephemeral:
            try:
                return await self.ha.start(config.listen_host, config.listen_port + 1)
            except OSError as e:
                log.warning("HA port %d is not free (%s): using any free port", config.listen_port + 1, e)
        return await self.ha.start(config.listen_host, 0)

    async def stop(self) -> None:
        """Stop cleanly: unregister, answer held pulls, close connections, flush and checkpoint."""
        self.stopped = True
        await self.scheduler.stop()
        await self.tasks.close()
        if self.dledger is not None:
            await self.dledger.close()
        if self.ha_client is not None:
            await self.ha_client.stop()
        await self.ha.stop()
        await self.registrar.unregister_all()
        await self.pops.close()
        self.hold.wake_all()
        self.consumption.close()
        await self.server.stop(grace=3.0)
        await self.client.close()
        self.offsets.persist()
        self.topics.file.flush_pending()
        self.groups.file.flush_pending()
        self.store.close()
        self.scheduler.save()
        log.info("broker %s stopped", self.config.broker_name)

    def _every(self, period: float, job) -> None:
        name = getattr(job, "__name__", repr(job))

        async def loop() -> None:
            while True:
                await asyncio.sleep(period)
                try:
                    await job()
                except Exception:
                    log.exception("periodic task %s failed", name)

        self.tasks.spawn(loop(), f"every {period:g} s: {name}")

    def _spawn(self, coro, name: str) -> asyncio.Task | None:
        """Run `coro` as a task of the broker; once it is stopping, nothing new starts."""
        if self.stopped:
            coro.close()
            return None
        return self.tasks.spawn(coro, name)

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
        self.ha.written()

    # ---------------------------------------------------------------- roles

    def _dledger_node(self, single_log: bool) -> DLedgerNode:
        """A member on the single log (single.py), or on the two files of a store that has them."""
        config = self.config
        tick = max(1, config.dledger_heartbeat_ms // 2)
        raft = RaftConfig(
            election_ticks=max(3, config.dledger_election_timeout_ms // tick),
            heartbeat_ticks=2,
            preferred_leader=config.preferred_leader_id or None,
            eager_inflight=1,  # under load, sends wait for the next acknowledgement: fewer, larger appends
        )
        settings = NodeSettings(
            config.dledger_self_id,
            config.dledger_peer_map,
            config.store.store_path_root_dir / "dledger",
            tick_ms=tick,
            raft=raft,
            sync_log=config.store.flush_disk_type == "SYNC_FLUSH",
            segment_bytes=config.store.mapped_file_size_commit_log,
            server_tls=self.server_tls,  # the Raft port is TLS as the client and HA ports are
            client_tls=self.client_tls,
        )
        node = SingleLogNode if single_log else DLedgerNode
        return node(settings, StoreApplier(self.store, self.written), self._dledger_leader_changed)

    def _dledger_leader_changed(self, is_leader: bool) -> None:
        """Raft's leader is the group's master (id 0), the others slaves: NameServers learn it now, so
        clients follow the new master without waiting for a registration period."""
        self.role = "master" if is_leader else "slave"
        self.store.replica = not is_leader  # a slave's store takes committed puts only (apply.py)
        if not is_leader:
            self.writer.lost_leadership()
        if is_leader:  # every earlier term's entry is in the store now (node.py): state from it
            self.store.dispatch()
            self.store.reload_queue_offsets()
            self.transactions.load()
            self.pops.promoted()
        log.info("broker %s is %s (DLedger)", self.config.broker_name, self.role)
        self.schedule_registration()
        if not is_leader:
            self._spawn(self.slave_sync.sync(), "copy the master's metadata")

    async def change_role(
        self, role: str, *, broker_id: int, epoch: int, master_addr: str | None, master_ha_addr: str | None
    ) -> None:
        """Become the master of `epoch` (take writes, serve replicas) or a slave copying `master_ha_addr`.

        A new master records <epoch, its max offset> in the epoch file first; a slave refuses writes
        at once, and its HA client truncates a divergent tail before copying. Instructions of an
        epoch older than one already seen are ignored.
        """
        if role not in ("master", "slave"):
            raise ValueError(f"role must be 'master' or 'slave', not {role!r}")
        if role == "master" and self.is_master and (epoch, broker_id) == (self.epoch, self.config.broker_id):
            return  # told again (controllers repeat themselves): replicas and waiting sends stay
        if role == "slave" and epoch >= self.epoch:
            self.role = "slave"  # before any await: no write is taken from here on
            self.store.replica = True
            self.ha.step_down()
            if self.config.enable_controller_mode:  # visible again once the new master confirms it
                self.store.dispatcher.limit = self.store.dispatcher.offset
        async with self._role_lock:
            if epoch < self.epoch:
                log.warning("ignoring role %s of epoch %d: epoch %d is newer", role, epoch, self.epoch)
                return
            self.epoch = epoch
            self.config.broker_id = broker_id
            if role == "master":
                await self._stop_replicating()
                store = self.store
                end = await asyncio.to_thread(store.settle_replicated_tail)
                self.epochs.append(epoch, end if self.epochs.entries else store.commitlog.min_offset)
                self.ha.serve_as_master(broker_id)
                self.store.replica = False
                self.pops.promoted()
                self.role = "master"
                log.info("broker %s is master of epoch %d at offset %d", self.config.broker_name, epoch, end)
            else:
                if master_addr:
                    self.slave_sync.master_addr = master_addr
                client = self.ha_client
                if client is None or client.master_ha_addr != master_ha_addr or client.min_epoch != epoch:
                    await self._stop_replicating()
                    if master_ha_addr:
                        self.ha_client = HAClient(
                            self.config,
                            self.store,
                            self.epochs,
                            self.written,
                            master_ha_addr,
                            min_epoch=epoch,
                            tls=self.client_tls,
                        )
                        self.ha_client.start()
                log.info(
                    "broker %s is a slave of %s (epoch %d)", self.config.broker_name, master_ha_addr, epoch
                )
        self.schedule_registration()
        if role == "slave":
            self._spawn(self.slave_sync.sync(), "copy the master's metadata")

    async def _stop_replicating(self) -> None:
        if self.ha_client is not None:
            await self.ha_client.stop()
            self.ha_client = None

    def master_ha_addr_learned(self, addr: str) -> None:
        """A static slave learns (or re-learns) its master's HA address from a NameServer."""
        if self.config.enable_controller_mode or self.config.enable_dledger_commit_log or self.is_master:
            return
        client = self.ha_client
        if client is None or client.master_ha_addr != addr:
            self._spawn(
                self.change_role("slave", broker_id=self.config.broker_id, epoch=self.epoch,
                                 master_addr=None, master_ha_addr=addr),
                f"replicate from {addr}",
            )  # fmt: skip

    def _arrived(self, queues: list[tuple[str, int]]) -> None:
        """The dispatcher's report of queues with new entries (thread-safe)."""
        self.hold.arrived(queues)
        self.scheduler.arrived(queues)

    def schedule_registration(self) -> None:
        """Tell the NameServers about a topic change soon (coalesced), not at the next period.

        A registration already on its way may have taken the topic table before this change: it
        registers once more when done, so no new topic waits for the next period."""
        if self._registration is not None and not self._registration.done():
            self._register_again = True
            return
        self._registration = self._spawn(self._register_changes(), "register topic changes")

    async def _register_changes(self) -> None:
        self._register_again = True
        while self._register_again:
            self._register_again = False
            await self.registrar.register_all()

    async def _check_transactions(self) -> None:
        """Check-backs are the master's job (a promoted slave takes it over; a slave acting for its
        missing master checks without writing)."""
        if not self.acting_master.delivers():
            return
        if self.is_master:
            await self.transactions.check()
        else:
            await self.transactions.check_as_acting_master()

    def _acting_bridge(self) -> EscapeBridge | None:
        acting = self.acting_master
        return acting.bridge if acting.acting and not self.is_master else None

    @property
    def replicating(self) -> bool:
        """Whether this slave has a live replication connection to a master."""
        return self.ha_client is not None and self.ha_client.connected

    async def _persist_offsets(self) -> None:
        self.offsets.persist()

    async def _expire_clients(self) -> None:
        for group in self.clients.expire(self.config.channel_expired_timeout / 1000):
            self.notify_consumer_ids_changed(group)

    def _connection_closed(self, conn: Connection) -> None:
        self.quotas.closed(conn.remote_address)
        for group in self.clients.drop_connection(conn):
            self.notify_consumer_ids_changed(group)

    def notify_consumer_ids_changed(self, group: str) -> None:
        if not self.config.notify_consumer_ids_changed_enable:
            return
        consumers = self.clients.consumers.get(group)
        if consumers and consumers.members:
            connections = [m.connection for m in consumers.members.values()]
            self._spawn(notify_ids_changed(connections, group), f"notify group {group}")

    def runtime_info(self) -> dict[str, str]:
        store, cl = self.store, self.store.commitlog
        put_messages, put_bytes = self.puts.stored.total()
        return {
            "brokerVersionDesc": f"ferrymq {__version__}",
            **store_info(
                cl_min=cl.min_offset,
                cl_max=store.visible_offset,
                flushed=cl.flushed_offset,
                dispatched=store.dispatcher.offset,
                disk_percent=store.disk_usage_ratio(),
                path=self.config.store.store_path_root_dir,
                put_messages=put_messages,
                put_bytes=put_bytes,
                earliest=store.get_earliest_message_time(),
                started_ms=int(self.started_at * 1000),
                uptime=time.time() - self.started_at,
                version=Version.V5_3_3,
            ),
            **self.stats.info(),
            "pullHoldingCount": str(self.hold.waiting()),
            "diskFull": str(store.disk_full).lower(),
            "haServerAddr": self.config.ha_addr,
            **self.ha.qos_info(),
            **self.acting_master.info(),
            # Since the broker started (RocketMQ counts from midnight), as the metrics' exporter names say.
            "msgPutTotalTodayNow": str(sum(n for _, n, _ in self.puts.stored.items())),
            "msgGetTotalTodayNow": str(
                sum(n for tally in (self.reads.delivered, self.pops.delivered) for _, n, _ in tally.items())
            ),
            **self.scheduler.runtime_info(),
            **self.transactions.stats(),
            **self.pops.runtime_info(),
        }
