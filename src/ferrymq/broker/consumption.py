"""Consumption control enforced by the broker: pause a group (or some of its clients) and limit how
many messages per second a group is given, so that every client obeys, whatever its make.

The controls are attributes of the subscription group config (RocketMQ 5.x keeps `attributes` there
too), so they are set with UPDATE_AND_CREATE_SUBSCRIPTIONGROUP and persisted in
subscriptionGroup.json with the rest of the group:

- `ferrymq.paused` = "true": every client of the group gets no messages.
- `ferrymq.pausedClients` = "id1,id2": these client ids get no messages.
- `ferrymq.consumeRateLimit` = "N": the group gets at most N messages per second (a token bucket
  holding one second's worth).

A pull that may not have messages now is held like a long poll — until the group is resumed or a
token is due, at most the pull's suspend time — and then answered, so clients do not spin. Consume
quotas (ferrymq.broker.quota: per group, topic or user) hold pulls and pops the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable

from ferrymq.broker.clients import ClientRegistry
from ferrymq.broker.quota import QuotaLimiter
from ferrymq.broker.tokens import TokenBucket
from ferrymq.protocol.bodies import PAUSED, PAUSED_CLIENTS, RATE_LIMIT, SubscriptionGroupConfig
from ferrymq.store import GetResult, GetStatus, MessageStore

CONTROL_ATTRIBUTES = (PAUSED, PAUSED_CLIENTS, RATE_LIMIT)


class GroupGate:
    """One group's controls, as its config says now."""

    def __init__(self, group: str, attributes: dict[str, str], bucket: TokenBucket | None) -> None:
        self.group = group
        self.paused = attributes.get(PAUSED, "").lower() == "true"
        self.paused_clients = frozenset(c for c in attributes.get(PAUSED_CLIENTS, "").split(",") if c)
        self.bucket = bucket
        self.changed = asyncio.Event()  # set when this gate is replaced: held pulls look again


class ConsumptionControl:
    def __init__(self, clients: ClientRegistry, quotas: QuotaLimiter | None = None) -> None:
        self.clients = clients
        self.quotas = quotas if quotas is not None else QuotaLimiter()
        self._gates: dict[str, GroupGate] = {}
        self._closing = False

    def gate(self, group: str) -> GroupGate | None:
        """The group's gate; None (nothing to check) for the usual group without controls."""
        return self._gates.get(group)

    def watches(self, group: str) -> bool:
        """Whether reads of `group` go through admit (False: the usual case, nothing to check)."""
        return self.quotas.consume or group in self._gates

    def update(self, config: SubscriptionGroupConfig) -> None:
        """The group's config changed (or was loaded): apply its controls at once."""
        old = self._gates.pop(config.group_name, None)
        attributes = config.attributes
        if any(attributes.get(a) for a in CONTROL_ATTRIBUTES):
            rate = _rate(attributes.get(RATE_LIMIT))
            kept = old.bucket if old is not None else None  # the same limit keeps its tokens (and debt)
            bucket = kept if kept is not None and kept.rate == rate else (TokenBucket(rate) if rate else None)
            self._gates[config.group_name] = GroupGate(config.group_name, attributes, bucket)
        if old is not None:
            old.changed.set()

    def update_all(self, configs: Iterable[SubscriptionGroupConfig]) -> None:
        """A whole group table (loaded, or a slave's copy of its master's): every group as it says."""
        configs = list(configs)
        for group in set(self._gates) - {c.group_name for c in configs}:
            self.remove(group)
        for config in configs:
            self.update(config)

    def took(self, group: str, count: int, topic: str = "", conn: object = None, nbytes: int = 0) -> None:
        """A pull of the group was given `count` messages (`nbytes`): they use up tokens."""
        quotas = self.quotas
        if quotas.consume and count:
            quotas.charge_consume(group, topic, quotas.user_of(conn), count, nbytes)
        if self._gates:
            gate = self._gates.get(group)
            if gate is not None and gate.bucket is not None and count:
                gate.bucket.take(count)

    def remove(self, group: str) -> None:
        old = self._gates.pop(group, None)
        if old is not None:
            old.changed.set()

    async def admit(self, group: str, conn: object, wanted: int, hold: float, topic: str = "") -> int:
        """How many messages this pull may take now (0: none), waiting up to `hold` s for the group
        to be resumed or for its next token. `conn` is the consumer's registered connection, by
        which pausing single clients matches (anything else matches no client) and the user of
        per-user quotas is known."""
        deadline = time.monotonic() + hold
        wanted = await self._admit_group(group, conn, wanted, deadline) if group in self._gates else wanted
        if wanted and self.quotas.consume:
            wanted = await self._admit_quota(group, topic, self.quotas.user_of(conn), wanted, deadline)
        return wanted

    async def _admit_quota(
        self, group: str, topic: str, user: str | None, wanted: int, deadline: float
    ) -> int:
        while True:
            allowed, wait = self.quotas.consume_allowance(group, topic, user)
            if allowed >= 1:
                return int(min(wanted, allowed))
            left = deadline - time.monotonic()
            if self._closing or left <= 0:
                return 0
            await asyncio.sleep(min(max(wait, 0.001), left))

    async def _admit_group(self, group: str, conn: object, wanted: int, deadline: float) -> int:
        while (gate := self._gates.get(group)) is not None:
            if self._paused(gate, conn):
                wait = deadline - time.monotonic()
            elif gate.bucket is None:
                return wanted
            elif (tokens := int(gate.bucket.available())) >= 1:
                return min(wanted, tokens)
            else:
                wait = min(gate.bucket.next_token_in(), deadline - time.monotonic())
            if self._closing or deadline - time.monotonic() <= 0:
                return 0
            # wait_for, not asyncio.timeout: pulls and pops run eagerly, outside any task, up to
            # their first wait (net.dispatch), and this can be it
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gate.changed.wait(), max(wait, 0.001))
        return wanted

    def close(self) -> None:
        """At shutdown: answer every held pull now (with nothing)."""
        self._closing = True
        for gate in self._gates.values():
            gate.changed.set()

    def _paused(self, gate: GroupGate, conn: object) -> bool:
        if gate.paused:
            return True
        if not gate.paused_clients:
            return False
        consumers = self.clients.consumers.get(gate.group)
        members = consumers.members.values() if consumers else ()
        return any(m.connection is conn and m.client_id in gate.paused_clients for m in members)


def _rate(raw: str | None) -> float:
    try:
        rate = float(raw) if raw else 0.0
    except ValueError:
        return 0.0
    return rate if rate > 0 else 0.0


def held_back(store: MessageStore, topic: str, queue_id: int, offset: int) -> GetResult:
    """The answer to a pull that may take nothing now: no new message, go on from the same offset."""
    low, high = store.get_min_offset(topic, queue_id), store.get_max_offset(topic, queue_id)
    return GetResult(GetStatus.OFFSET_FOUND_NULL, offset, low, high)
