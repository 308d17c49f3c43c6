"""BrokerConfig: a broker's settings, RocketMQ's names in snake_case, from TOML, env and flags.

One flat namespace as in RocketMQ's broker.conf: broker settings and store settings side by side
(`broker_name`, `flush_disk_type`, `file_reserved_time`, ...). Later sources win: defaults, then
the TOML file, then `FERRYMQ_<NAME>` environment variables, then command-line flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferrymq import settings
from ferrymq.ha.dledger.peers import parse_peers, slave_broker_id
from ferrymq.net.tls import TLSSettings
from ferrymq.store import StoreConfig

BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")


@dataclass
class BrokerConfig(TLSSettings):
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = 0
    namesrv_addr: str = ""  # "host:port;host2:port2"
    # Without namesrv_addr: the NameServer list from the address service (RocketMQ's), polled and followed.
    fetch_namesrv_addr_by_address_server: bool = False
    rmq_address_server_domain: str = "jmenv.tbsite.net"  # http://<domain>[:8080]/rocketmq/<sub group>
    rmq_address_server_sub_group: str = "nsaddr"
    namesrv_addr_poll_interval: int = 120_000  # ms between fetches of the list (RocketMQ: 2 minutes)
    listen_host: str = "0.0.0.0"
    listen_port: int = 10911
    broker_ip1: str = ""  # the address published to NameServers; default: the listen host, or 127.0.0.1
    broker_permission: int = 6  # PermName READ|WRITE
    auto_create_topic_enable: bool = True
    # ms after a topic's deletion here during which a send does not auto-create it again (answered
    # TOPIC_NOT_EXIST): producers holding a route from before a move (clients refresh routes every
    # 30 s) fetch it again instead of bringing the topic back. 0: no hold.
    auto_create_hold_after_delete: int = 120_000
    default_topic_queue_nums: int = 8
    auto_create_subscription_group: bool = True
    enable_mixed_message_type: bool = False  # may a topic take every message type (message.type=MIXED)
    register_name_server_period: int = 30_000  # ms
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    flush_consumer_offset_interval: int = 5000  # ms
    channel_expired_timeout: int = 120_000  # ms without a heartbeat before a client is dropped
    notify_consumer_ids_changed_enable: bool = True
    rebalance_lock_max_live_time: int = 60_000  # ms
    enable_property_filter: bool = False  # SQL92 subscriptions (RocketMQ's enablePropertyFilter)
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    trace_topic_enable: bool = False  # create msg_trace_topic_name (1 queue) at start, as RocketMQ does
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"
    transaction_timeout: int = 6000  # ms: a half message younger than this is not checked back yet
    transaction_check_interval: int = 30_000  # ms between passes of the check-back service
    transaction_check_max: int = 15  # check-backs before a half message goes to TRANS_CHECK_MAX_TIME_TOPIC
    # Replication (classic master/slave and controller mode).
    broker_role: str = "ASYNC_MASTER"  # ASYNC_MASTER | SYNC_MASTER | SLAVE (static mode)
    ha_listen_port: int = -1  # -1: listen_port + 1 (RocketMQ's default); 0: any free port
    ha_master_address: str = ""  # a static slave's master HA address (NameServers do not override it)
    slave_sync_interval: int = 10_000  # ms between a slave's copies of its master's topics, offsets, ...
    # Most bytes a transfer frame carries. RocketMQ's haTransferBatchSize is 32 KiB; ours is larger
    # because every frame costs both ends Python work, and a replica reads it straight into its log.
    ha_transfer_batch_size: int = 256 * 1024
    # ASYNC_MASTER only: after a transfer smaller than the batch size, wait this long for more bytes
    # (no send waits on a replica there), so small writes travel in fewer, larger frames.
    ha_async_coalesce_ms: float = 1.0
    ha_send_heartbeat_interval: int = 5000  # ms
    ha_housekeeping_interval: int = 20_000  # ms without a frame before an HA connection is dropped
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024  # SYNC_MASTER: replicas further behind do not count
    ha_max_time_slave_not_catchup: int = 15_000  # ms before a lagging replica leaves the SyncStateSet
    all_ack_in_sync_state_set: bool = False
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    # Replication QoS of the group (ferrymq.ha.qos): -1 off (broker_role and the settings above
    # decide, as RocketMQ); 0 or 1 asynchronous, availability first; 2 single master -> async ->
    # semi-sync -> sync and back as replicas come and go.
    replication_qos_level: int = -1
    replication_qos_semi_sync_gap: int = 50  # sends a replica may lack to enter semi-sync
    enable_controller_mode: bool = False
    controller_addr: str = ""  # "host:port;host2:port2", every controller of the group
    broker_heartbeat_interval: int = 1000  # ms between heartbeats (and master look-ups) to the controllers
    controller_heart_beat_timeout_mills: int = 10_000  # ms without heartbeats before a new election
    broker_election_priority: int = 2**31 - 1  # lower is preferred when epoch and offset tie
    # DLedger mode: the CommitLog replicated by Raft in a group of 3 or 5 (RocketMQ's enableDLegerCommitLog,
    # dLegerGroup, dLegerPeers "n0-host:port;n1-host:port;...", dLegerSelfId, preferredLeaderId).
    enable_dledger_commit_log: bool = False
    dledger_group: str = ""
    dledger_peers: str = ""
    dledger_self_id: str = ""
    preferred_leader_id: str = ""
    dledger_heartbeat_ms: int = 200  # the leader's heartbeats; the election timeout is random in [1x, 2x)
    dledger_election_timeout_ms: int = 1000
    slave_read_enable: bool = False
    # Classic mode: while the master is down, the slave with the lowest id delivers due scheduled
    # messages and checks back transactions, putting through other masters (broker/acting_master.py).
    enable_slave_acting_master: bool = False
    # ms a master waits for a connected slave to acknowledge an intent (schedule/intents.py) before it
    # goes on without that slave, until the slave catches up
    slave_acting_intent_timeout: int = 3000
    # ms an acting slave leaves to its master what the master may have done (an intent without the
    # deed in its copy of the log); then it does it, at least once
    slave_acting_undecided_timeout: int = 60_000
    access_message_in_memory_max_ratio: int = 40  # % of RAM: pulls further behind go to a slave
    # Authentication and access control (RocketMQ 5's ACL 2.0). Users and rules live in the store's
    # config dir (auth.json) and change at run time by the AUTH_* requests (`ferrymq admin acl`).
    auth_enabled: bool = False
    init_username: str = ""  # the first super user, created at start when it does not exist
    init_password: str = ""
    # What this broker signs its requests to NameServers and other brokers with; default: init user.
    inner_client_access_key: str = ""
    inner_client_secret_key: str = ""
    store: StoreConfig = field(default_factory=StoreConfig)

    def __post_init__(self) -> None:
        if bool(self.init_username) != bool(self.init_password):
            raise ValueError("init_username and init_password go together")
        if bool(self.inner_client_access_key) != bool(self.inner_client_secret_key):
            raise ValueError("inner_client_access_key and inner_client_secret_key go together")
        if self.broker_role not in BROKER_ROLES:
            raise ValueError(
                f"broker_role must be one of {', '.join(BROKER_ROLES)}, not {self.broker_role!r}"
            )
        if self.replication_qos_level not in (-1, 0, 1, 2):
            raise ValueError(f"replication_qos_level must be -1, 0, 1 or 2, not {self.replication_qos_level}")
        if self.replication_qos_semi_sync_gap < 0:
            raise ValueError("replication_qos_semi_sync_gap must be >= 0")
        if self.enable_dledger_commit_log:
            self._check_dledger()
            return  # Raft elects the master; a follower is a slave with an id from its DLedger id
        if self.enable_controller_mode:
            return  # the controller assigns roles and ids
        if self.broker_role == "SLAVE" and self.broker_id <= 0:
            raise ValueError("a SLAVE needs broker_id > 0")
        if self.broker_role != "SLAVE":
            self.broker_id = 0  # a master is id 0, as in RocketMQ

    def _check_dledger(self) -> None:
        if self.enable_controller_mode:
            raise ValueError("enable_dledger_commit_log and enable_controller_mode exclude each other")
        peers = self.dledger_peer_map  # raises on a malformed list
        if self.dledger_self_id not in peers:
            raise ValueError(f"dledger_self_id {self.dledger_self_id!r} is not one of dledger_peers")
        if self.preferred_leader_id and self.preferred_leader_id not in peers:
            raise ValueError(f"preferred_leader_id {self.preferred_leader_id!r} is not one of dledger_peers")
        if not 0 < self.dledger_heartbeat_ms < self.dledger_election_timeout_ms:
            raise ValueError("need 0 < dledger_heartbeat_ms < dledger_election_timeout_ms")
        self.broker_id = slave_broker_id(self.dledger_self_id, peers)

    @property
    def dledger_peer_map(self) -> dict[str, tuple[str, int]]:
        return parse_peers(self.dledger_peers)

    @property
    def inner_credentials(self) -> tuple[str, str]:
        """(access key, secret key) for requests to other nodes: the inner client's, else the init user's."""
        if self.inner_client_access_key:
            return self.inner_client_access_key, self.inner_client_secret_key
        return self.init_username, self.init_password

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    @property
    def broker_addr(self) -> str:
        """host:port as clients and NameServers see this broker."""
        host = self.broker_ip1 or (
            "127.0.0.1" if self.listen_host in ("0.0.0.0", "", "::") else self.listen_host
        )
        return f"{host}:{self.listen_port}"

    @property
    def ha_addr(self) -> str:
        """host:port of this broker's HA service, as replicas reach it."""
        return f"{self.broker_addr.rsplit(':', 1)[0]}:{self.ha_listen_port}"

    @classmethod
    def load(cls, toml_path: Path | None = None, overrides: dict[str, Any] | None = None) -> BrokerConfig:
        """Defaults < TOML file < FERRYMQ_* environment < `overrides` (the command line)."""
        return settings.load(cls, toml_path, overrides)

    @classmethod
    def from_settings(cls, values: dict[str, Any]) -> BrokerConfig:
        """From these settings alone (no file, no environment)."""
        return settings.load(cls, None, values, environ={})


ConfigError = settings.SettingsError  # what a bad setting raises
