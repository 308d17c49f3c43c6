"""A DLedger group's members as RocketMQ's broker config names them.

`dLegerPeers` is ``"n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913"``: each member's id,
a dash, and the host:port its Raft traffic goes to. A follower registers with the NameServers as a
slave whose broker id is its id's number plus one (``n0`` → 1), as RocketMQ's DLedger mode does, so
the ids never collide with the master's 0.
"""

from __future__ import annotations


def parse_peers(text: str) -> dict[str, tuple[str, int]]:
    """``{"n0": ("127.0.0.1", 40911), ...}`` in the order given; ValueError names a bad member."""
    peers: dict[str, tuple[str, int]] = {}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        node, sep, addr = part.partition("-")
        host, colon, port = addr.rpartition(":")
        if not sep or not node or not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"DLedger peer {part!r} is not id-host:port")
        if node in peers:
            raise ValueError(f"DLedger peer {node!r} is listed twice")
        peers[node] = (host, int(port))
    return peers


def slave_broker_id(self_id: str, peers: dict[str, tuple[str, int]]) -> int:
    """The broker id a follower registers under: its id's number + 1, else its place + 1."""
    digits = self_id.lstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
    if digits.isdigit():
        return int(digits) + 1
    return list(peers).index(self_id) + 1
