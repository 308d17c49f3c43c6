"""Which policy applies to an exchange or queue, and what a queue's settings come to when its
x-arguments and its policy both speak (RabbitMQ 3.10: rabbit_policy, rabbit_amqqueue_process).

One policy applies at most: among those whose apply-to fits and whose pattern (a regular expression,
unanchored, as Erlang's re:run) finds the name, the highest priority; among equals the first by name
(RabbitMQ 3.10.8 picks among equals in its table's hash order: tried, neither name nor age decides).
Numeric limits take the lower of argument and policy; names (dead-letter exchange and key) and the
overflow mode take the argument. x-max-priority and x-single-active-consumer have no policy key.
ferrymq adds graded-retry, max-retries, broadcast and message-trace (x-graded-retry ... as arguments)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Literal

from ferrymq.meta.entities import Arguments, Exchange, Policy, Queue

Kind = Literal["exchange", "queue"]
_APPLIES = {"exchange": ("all", "exchanges"), "queue": ("all", "queues")}

# policy key → (normalized name, how argument and policy combine, kind of value)
_LOWER, _ARGUMENT, _ONLY_ARGUMENT = "lower", "argument", "only-argument"
QUEUE_SETTINGS: dict[str, tuple[str, str, type]] = {
    "message-ttl": ("message_ttl", _LOWER, int),
    "expires": ("expires", _LOWER, int),
    "max-length": ("max_length", _LOWER, int),
    "max-length-bytes": ("max_length_bytes", _LOWER, int),
    "delivery-limit": ("delivery_limit", _LOWER, int),
    "overflow": ("overflow", _ARGUMENT, str),
    "dead-letter-exchange": ("dead_letter_exchange", _ARGUMENT, str),
    "dead-letter-routing-key": ("dead_letter_routing_key", _ARGUMENT, str),
    "max-priority": ("max_priority", _ONLY_ARGUMENT, int),
    "single-active-consumer": ("single_active_consumer", _ONLY_ARGUMENT, bool),
    # ferrymq's own, for what RabbitMQ lacks (a policy switches them on for a whole vhost)
    "graded-retry": ("graded_retry", _ARGUMENT, bool),
    "max-retries": ("max_retries", _LOWER, int),
    "broadcast": ("broadcast", _ARGUMENT, bool),
    "message-trace": ("message_trace", _ARGUMENT, bool),
}


def _valid(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return isinstance(value, kind)


def _pattern(policy: Policy) -> re.Pattern[str] | None:
    try:
        return re.compile(policy.pattern)
    except re.error:
        return None  # RabbitMQ refuses such a policy; one that got in anyway matches nothing


class Policies:
    """The policies of one vhost, with each name's effective policy remembered until they change."""

    def __init__(self, policies: Iterable[Policy] = ()) -> None:
        self._policies: dict[str, tuple[Policy, re.Pattern[str] | None]] = {}
        self._effective: dict[tuple[Kind, str], Policy | None] = {}
        self.version = 0  # counts changes: what was derived from the policies holds until it moves
        for policy in policies:
            self.put(policy)

    def put(self, policy: Policy) -> None:
        self._policies[policy.name] = (policy, _pattern(policy))
        self._changed()

    def delete(self, name: str) -> None:
        self._policies.pop(name, None)
        self._changed()

    def _changed(self) -> None:
        self._effective.clear()
        self.version += 1

    def effective(self, kind: Kind, name: str) -> Policy | None:
        key = (kind, name)
        if key not in self._effective:
            fits = [
                policy
                for policy, pattern in self._policies.values()
                if policy.apply_to in _APPLIES[kind] and pattern is not None and pattern.search(name)
            ]
            fits.sort(key=lambda p: (-p.priority, p.name))
            self._effective[key] = fits[0] if fits else None
        return self._effective[key]

    def policy_for(self, entity: Exchange | Queue) -> Policy | None:
        return self.effective("exchange" if isinstance(entity, Exchange) else "queue", entity.name)

    def alternate_exchange(self, exchange: Exchange) -> str | None:
        """The exchange's alternate exchange: its argument, else its policy's (rabbit_policy:get_arg)."""
        name = exchange.arguments.get("alternate-exchange")
        if isinstance(name, str):
            return name
        policy = self.effective("exchange", exchange.name)
        name = policy.definition.get("alternate-exchange") if policy is not None else None
        return name if isinstance(name, str) else None

    def queue_settings(self, queue: Queue) -> dict[str, Any]:
        """The queue's effective settings under normalized names (only those set, ill-typed values
        left out): see QUEUE_SETTINGS."""
        policy = self.effective("queue", queue.name)
        return combine(queue.arguments, policy.definition if policy is not None else {})


def combine(arguments: Arguments, definition: Arguments) -> dict[str, Any]:
    """Queue x-arguments and a policy definition combined as RabbitMQ does."""
    settings: dict[str, Any] = {}
    for key, (name, rule, kind) in QUEUE_SETTINGS.items():
        argument = arguments.get(f"x-{key}")
        argument = argument if _valid(argument, kind) else None
        from_policy = definition.get(key) if rule != _ONLY_ARGUMENT else None
        from_policy = from_policy if _valid(from_policy, kind) else None
        if argument is not None and from_policy is not None and rule == _LOWER:
            settings[name] = min(argument, from_policy)
        elif argument is not None or from_policy is not None:
            settings[name] = argument if argument is not None else from_policy
    return settings
