"""QuotaLimiter: the quotas one broker keeps, their token buckets, and the answers the put, read
and connection paths get from them.

Buckets hold BURST_S seconds' worth (at least one message), so a limit is a rate rather than a
permission to send a second's worth at once; debts are allowed (a batch counts all its messages),
and later requests wait them off. Over a producer's limit a put is refused with RocketMQ's flow
control answer (SYSTEM_BUSY, remark starting "[TOO_MANY_REQUESTS]"), which clients retry with
back-off; over a consumer's limit a read gets fewer messages, or none after waiting, never an error.
"""

from __future__ import annotations

import math
from typing import Any

from ferrymq.broker.quota.model import CONNECTIONS, CONSUME, PRODUCE, Quota, QuotaError
from ferrymq.broker.tokens import TokenBucket
from ferrymq.protocol.caller import CALLER
from ferrymq.protocol.codes import FLOW_CONTROL_REMARK

BURST_S = 0.1


class _Meter:
    """The buckets of one rate quota."""

    __slots__ = ("bytes", "messages", "quota")

    def __init__(self, quota: Quota, old: _Meter | None) -> None:
        self.quota = quota
        self.messages: TokenBucket | None = _bucket(quota.messages, old.messages if old else None, 1.0)
        self.bytes: TokenBucket | None = _bucket(quota.bytes, old.bytes if old else None, 1.0)

    def allowance(self) -> float:
        """Messages that may go now (inf: no message limit); 0 while any bucket is empty or in debt."""
        if self.bytes is not None and self.bytes.available() <= 0:
            return 0.0
        return math.inf if self.messages is None else math.floor(self.messages.available())

    def wait(self) -> float:
        """Seconds until the next message may go."""
        waits = [b.next_token_in() for b in (self.messages, self.bytes) if b is not None]
        return max(waits, default=0.0)

    def charge(self, count: int, nbytes: int) -> None:
        if self.messages is not None:
            self.messages.take(count)
        if self.bytes is not None:
            self.bytes.take(nbytes)

    def refusal(self) -> str:
        q = self.quota
        limits = " and ".join(
            f"{v:g} {unit}/s" for v, unit in ((q.messages, "messages"), (q.bytes, "bytes")) if v
        )
        return f"{FLOW_CONTROL_REMARK}quota exceeded: {q.resource} may {q.kind} {limits}; slow down and retry"


def _bucket(rate: float, old: TokenBucket | None, least: float) -> TokenBucket | None:
    if not rate:
        return None
    if old is not None and old.rate == rate:
        return old  # the same limit keeps its tokens (and its debt)
    return TokenBucket(rate, max(rate * BURST_S, least))


class QuotaLimiter:
    def __init__(self) -> None:
        self.quotas: dict[tuple[str, str], Quota] = {}
        self._meters: dict[tuple[str, str], _Meter] = {}
        self.produce = False  # any produce quota: the put path's only test when there is none
        self.consume = False
        self._max_connections: dict[str, int] = {}  # AccessKey -> limit
        self._users: dict[str, str] = {}  # peer address -> the AccessKey its requests carry
        self._addresses: dict[str, set[str]] = {}  # AccessKey -> its peers' addresses

    # --- quotas --------------------------------------------------------------------------------

    def set(self, quota: Quota) -> None:
        self.quotas[quota.key] = quota
        self._rebuild()

    def delete(self, kind: str, resource: str) -> Quota:
        quota = self.quotas.pop((kind, resource), None)
        if quota is None:
            raise LookupError(f"no {kind} quota on {resource}")
        self._rebuild()
        return quota

    def snapshot(self) -> list[dict[str, Any]]:
        return [q.to_json() for _, q in sorted(self.quotas.items())]

    def restore(self, data: object) -> None:
        if not isinstance(data, list):
            raise QuotaError("the quota file holds a list of quotas")
        self.quotas = {q.key: q for q in map(Quota.from_json, data)}
        self._rebuild()

    def _rebuild(self) -> None:
        old = self._meters
        self._meters = {k: _Meter(q, old.get(k)) for k, q in self.quotas.items() if q.kind != CONNECTIONS}
        self.produce = any(k == PRODUCE for k, _ in self._meters)
        self.consume = any(k == CONSUME for k, _ in self._meters)
        self._max_connections = {
            r.partition(":")[2]: q.connections for (k, r), q in self.quotas.items() if k == CONNECTIONS
        }

    def _applying(self, kind: str, names: tuple[tuple[str, str | None], ...]) -> list[_Meter]:
        meters = self._meters
        found = (meters.get((kind, f"{scope}:{name}")) for scope, name in names if name)
        return [m for m in found if m is not None]

    # --- producing -----------------------------------------------------------------------------

    def admit_put(self, topic: str, user: str | None) -> str | None:
        """None when a put to `topic` by `user` may go now; else the flow-control remark."""
        for meter in self._applying(PRODUCE, (("Topic", topic), ("User", user))):
            if meter.allowance() < 1:
                return meter.refusal()
        return None

    def charge_put(self, topic: str, user: str | None, count: int, nbytes: int) -> None:
        for meter in self._applying(PRODUCE, (("Topic", topic), ("User", user))):
            meter.charge(count, nbytes)

    # --- consuming -----------------------------------------------------------------------------

    def consume_allowance(self, group: str, topic: str, user: str | None) -> tuple[float, float]:
        """(messages a read may take now, seconds until one more may go when none may)."""
        meters = self._applying(CONSUME, (("Group", group), ("Topic", topic), ("User", user)))
        allowed = min((m.allowance() for m in meters), default=math.inf)
        return allowed, (max(m.wait() for m in meters) if allowed < 1 else 0.0)

    def charge_consume(self, group: str, topic: str, user: str | None, count: int, nbytes: int) -> None:
        for meter in self._applying(CONSUME, (("Group", group), ("Topic", topic), ("User", user))):
            meter.charge(count, nbytes)

    # --- connections ---------------------------------------------------------------------------

    def user_of(self, connection: object) -> str | None:
        """The AccessKey a client connection's requests carry, else the one a front checked for the
        request being served (the gRPC proxy's); None: unknown or unsigned."""
        return self._users.get(getattr(connection, "remote_address", "")) or CALLER.get()

    def connected(self, address: str, user: str) -> str | None:
        """A request from `address` signed by `user`: None to go on, or why the connection is one
        too many for the user (it is then not counted)."""
        known = self._users.get(address)
        if known == user:
            return None
        if known is not None:
            self.closed(address)
        peers = self._addresses.setdefault(user, set())
        limit = self._max_connections.get(user)
        if limit is not None and len(peers) >= limit:
            return f"User:{user} has reached the maximum number of connections ({limit})"
        peers.add(address)
        self._users[address] = user
        return None

    def closed(self, address: str) -> None:
        user = self._users.pop(address, None)
        if user is not None:
            peers = self._addresses.get(user)
            if peers is not None:
                peers.discard(address)
                if not peers:
                    del self._addresses[user]

    def max_connections(self, user: str) -> int | None:
        return self._max_connections.get(user)

    def connections_of(self, user: str) -> int:
        return len(self._addresses.get(user, ()))
