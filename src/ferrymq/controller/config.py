"""ControllerConfig: one controller node's settings, RocketMQ's ControllerConfig names in snake_case."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ferrymq.net.tls import TLSSettings


class PeersError(ValueError):
    """A --peers value that does not read as "n1@host:port;n2@host:port;..."."""


def parse_peers(text: str) -> dict[str, str]:
    """``"n1@h:p;n2@h:p"`` → ``{"n1": "h:p", ...}`` (the Raft addresses; RocketMQ's controllerDLegerPeers)."""
    peers: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        node_id, at, address = item.partition("@")
        host, colon, port = address.rpartition(":")
        if not at or not node_id or not colon or not host or not port.isdigit():
            raise PeersError(f"bad peer {item!r}: expected id@host:port")
        if node_id in peers:
            raise PeersError(f"peer id {node_id!r} appears twice")
        peers[node_id] = address
    if not peers:
        raise PeersError("no peers given")
    return peers


@dataclass
class ControllerConfig(TLSSettings):
    node_id: str  # RocketMQ's controllerDLegerSelfId
    peers: dict[str, str]  # node id → Raft host:port, this node's included
    data_dir: Path  # controllerStorePath
    listen_host: str = "0.0.0.0"
    listen_port: int = 9878  # remoting port brokers and admins talk to
    advertised_host: str = (
        ""  # the host in the address other nodes hand out; default: listen host or 127.0.0.1
    )
    scan_not_active_broker_interval: int = 5000  # ms between two looks for brokers gone quiet
    default_heartbeat_timeout: int = 10_000  # ms; a broker's heartbeat may name its own
    enable_elect_unclean_master: bool = False
    notify_broker_role_changed: bool = True
    election_timeout: tuple[float, float] = field(default=(0.4, 1.4))  # Raft, seconds
    # The Raft group's shared secret: its messages are then encrypted and authenticated (pysyncobj
    # speaks no TLS); every node of the group needs the same one. Empty: plain, for trusted networks.
    raft_password: str = ""

    def __post_init__(self) -> None:
        if self.node_id not in self.peers:
            raise PeersError(f"this node's id {self.node_id!r} is not among the peers {sorted(self.peers)}")
        self.data_dir = Path(self.data_dir)

    @property
    def address(self) -> str:
        host = self.advertised_host or (
            "127.0.0.1" if self.listen_host in ("0.0.0.0", "", "::") else self.listen_host
        )
        return f"{host}:{self.listen_port}"
