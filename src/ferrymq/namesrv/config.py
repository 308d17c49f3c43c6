"""NamesrvConfig: the NameServer's settings, named after RocketMQ's NamesrvConfig in snake_case."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ferrymq.net.tls import TLSSettings


@dataclass
class NamesrvConfig(TLSSettings):
    listen_host: str = "0.0.0.0"
    listen_port: int = 9876
    broker_channel_expired_time: int = 120_000
    """ms without a registration (or heartbeat) after which a broker is dropped, unless the broker
    sets its own ``heartbeatTimeoutMillis`` when registering."""
    scan_not_active_broker_interval: int = 5000  # ms between two looks for expired brokers
    kv_config_path: Path | None = None  # Java keeps ~/namesrv/kvConfig.json; None keeps it in memory
    order_message_enable: bool = False  # answer routes with the topic's ORDER_TOPIC_CONFIG as orderTopicConf
    # Authentication and access control, as on brokers: users and rules in auth_path (default: auth.json
    # beside kv_config_path; neither: in memory), changed at run time by the AUTH_* requests.
    auth_enabled: bool = False
    init_username: str = ""
    init_password: str = ""
    auth_path: Path | None = None

    def __post_init__(self) -> None:
        if self.kv_config_path is not None:
            self.kv_config_path = Path(self.kv_config_path)
        if self.auth_path is not None:
            self.auth_path = Path(self.auth_path)
        elif self.kv_config_path is not None:
            self.auth_path = self.kv_config_path.with_name("auth.json")
        if bool(self.init_username) != bool(self.init_password):
            raise ValueError("init_username and init_password go together")
        if not 0 <= self.listen_port <= 65535:
            raise ValueError(f"listen_port must be 0..65535, not {self.listen_port}")
        if self.broker_channel_expired_time <= 0 or self.scan_not_active_broker_interval <= 0:
            raise ValueError(
                "broker_channel_expired_time and scan_not_active_broker_interval must be positive"
            )
