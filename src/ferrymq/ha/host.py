"""What replication needs from the broker it runs in, as a Protocol: the HA services take the
broker's configuration object and read these attributes (some change while it runs: ``broker_id``
on a role change), without importing the broker."""

from __future__ import annotations

from typing import Protocol


class HAConfig(Protocol):
    broker_id: int
    enable_controller_mode: bool
    all_ack_in_sync_state_set: bool
    in_sync_replicas: int
    min_in_sync_replicas: int
    ha_max_gap_not_in_sync: int
    ha_max_time_slave_not_catchup: int  # ms
    ha_housekeeping_interval: int  # ms
    ha_send_heartbeat_interval: int  # ms
    ha_transfer_batch_size: int
    ha_async_coalesce_ms: float
    replication_qos_level: int  # -1: off (the role decides); 0, 1: async; 2: walk up to sync
    replication_qos_semi_sync_gap: int  # sends
