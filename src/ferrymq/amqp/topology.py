"""One vhost's exchanges, queues, bindings and policies as a gateway routes with them: loaded from the
metadata service's snapshot, kept current by its change log, and asked where each published message
goes. Pure and synchronous; routing a message whose answer is cached costs one dict lookup.

Routing follows RabbitMQ 3.10 (rabbit_exchange:route): the exchange's type picks destinations; an
exchange that picks none hands the message to its alternate exchange; exchange-to-exchange bindings
are followed, each exchange at most once, and each queue gets one copy. The CC and BCC headers add
routing keys (sender-selected distribution; removing BCC from the delivered message is the caller's
part)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ferrymq.amqp.matching import Headers, Matcher, matcher_for
from ferrymq.amqp.policies import Policies
from ferrymq.meta.entities import Binding, Change, Exchange, Policy, Queue, Snapshot, decode
from ferrymq.meta.equivalence import amqp_type
from ferrymq.meta.errors import resource
from ferrymq.protocol.amqp.errors import ChannelException, ReplyCode
from ferrymq.protocol.amqp.fast import BASIC, PUBLISH

ROUTE_CACHE_SIZE = 8192  # (exchange, routing key) answers kept; the oldest goes first
_ROUTING_HEADERS = ("CC", "BCC")
_BindingKey = tuple[str, str, str, bytes]  # destination type, destination, routing key, arguments


@dataclass(frozen=True, slots=True)
class RouteResult:
    """Where a published message goes: its queues (each once, in the order routing found them), or
    the channel error publishing it is (then there are no queues)."""

    queues: tuple[Queue, ...] = ()
    error: ChannelException | None = None

    @property
    def routed(self) -> bool:
        """Whether any queue takes the message (if not, a mandatory publish gets basic.return 312)."""
        return bool(self.queues)


def _binding_key(binding: Binding) -> _BindingKey:
    arguments = msgspec.json.encode(binding.arguments, order="sorted")
    return (binding.destination_type, binding.destination, binding.routing_key, arguments)


def _publish_error(code: ReplyCode, reason: str) -> RouteResult:
    return RouteResult(error=ChannelException(code, reason, BASIC, PUBLISH))


def routing_keys(routing_key: str, headers: Headers | None) -> tuple[tuple[str, ...], RouteResult | None]:
    """The message's routing keys: its own, then those of its CC and BCC headers (arrays of strings;
    another type there makes the publish fail with 406, as in RabbitMQ)."""
    if not headers or ("CC" not in headers and "BCC" not in headers):
        return (routing_key,), None
    keys = [routing_key]
    for name in _ROUTING_HEADERS:
        value = headers.get(name)
        if value is None and name not in headers:
            continue
        if not isinstance(value, list):
            reason = f'invalid message: {{unacceptable_type_in_header,"{name}",{amqp_type(value)}}}'
            return (), _publish_error(ReplyCode.PRECONDITION_FAILED, reason)
        keys += (key for key in value if isinstance(key, str))
    return tuple(keys), None


class Topology:
    """The routing view of one vhost at `version` (the metadata scope's version it reflects)."""

    def __init__(self, vhost: str, version: int = 0) -> None:
        self.vhost = vhost
        self.version = version
        self._clear()

    def _clear(self) -> None:
        self._exchanges: dict[str, Exchange] = {}
        self._queues: dict[str, Queue] = {}
        self._from: dict[str, dict[_BindingKey, Binding]] = {}
        self._to_queue: dict[str, dict[_BindingKey, Binding]] = {}
        self._policies = Policies()
        self._matchers: dict[str, Matcher] = {}
        self._alternates: dict[str, str | None] = {}
        self._routes: OrderedDict[tuple[str, str], RouteResult] = OrderedDict()

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> Topology:
        topology = cls(snapshot.vhost.name, snapshot.version)
        for exchange in snapshot.exchanges:
            topology._put_exchange(exchange)
        for queue in snapshot.queues:
            topology._queues[queue.name] = queue
        for binding in snapshot.bindings:
            topology._put_binding(binding)
        for policy in snapshot.policies:
            topology._policies.put(policy)
        return topology

    # -- keeping current --------------------------------------------------------------------------

    def apply(self, change: Change) -> bool:
        """Apply one change of this vhost's log; one at or below `version` was seen already and is
        skipped. Whether it was applied. Deleting the vhost empties the topology. (When a watch
        answers `reset`, the log has no way from here: build a new topology from a snapshot.)"""
        if change.scope != self.vhost:
            raise ValueError(f"a change of scope '{change.scope}' given to the topology of '{self.vhost}'")
        if change.version <= self.version:
            return False
        entity = decode(change)
        put = change.op == "put"
        if isinstance(entity, Exchange) and put:
            self._put_exchange(entity)
        elif isinstance(entity, Exchange):
            self._delete_exchange(entity.name)
        elif isinstance(entity, Queue) and put:
            self._queues[entity.name] = entity
        elif isinstance(entity, Queue):
            self._queues.pop(entity.name, None)
            for binding in list(self._to_queue.get(entity.name, {}).values()):
                self._delete_binding(binding)
        elif isinstance(entity, Binding) and put:
            self._put_binding(entity)
        elif isinstance(entity, Binding):
            self._delete_binding(entity)
        elif isinstance(entity, Policy) and put:
            self._policies.put(entity)
        elif isinstance(entity, Policy):
            self._policies.delete(entity.name)
        elif change.kind == "vhost" and not put:
            self._clear()
        self._routes.clear()
        self._alternates.clear()
        self.version = change.version
        return True

    def _put_exchange(self, exchange: Exchange) -> None:
        self._exchanges[exchange.name] = exchange
        self._matchers.pop(exchange.name, None)

    def _delete_exchange(self, name: str) -> None:
        self._exchanges.pop(name, None)
        self._matchers.pop(name, None)
        for binding in list(self._from.get(name, {}).values()):
            self._delete_binding(binding)

    def _put_binding(self, binding: Binding) -> None:
        key = _binding_key(binding)
        self._from.setdefault(binding.source, {})[key] = binding
        if binding.destination_type == "queue":
            self._to_queue.setdefault(binding.destination, {})[(binding.source, *key[1:])] = binding
        self._matchers.pop(binding.source, None)

    def _delete_binding(self, binding: Binding) -> None:
        key = _binding_key(binding)
        self._from.get(binding.source, {}).pop(key, None)
        if binding.destination_type == "queue":
            self._to_queue.get(binding.destination, {}).pop((binding.source, *key[1:]), None)
        self._matchers.pop(binding.source, None)

    # -- lookups ----------------------------------------------------------------------------------

    def exchange(self, name: str) -> Exchange | None:
        return self._exchanges.get(name)

    def queue(self, name: str) -> Queue | None:
        return self._queues.get(name)

    def exchanges(self) -> list[Exchange]:
        return list(self._exchanges.values())

    def queues(self) -> list[Queue]:
        return list(self._queues.values())

    def bindings_from(self, exchange: str) -> list[Binding]:
        """The bindings whose source is `exchange` (to queues and to exchanges)."""
        return list(self._from.get(exchange, {}).values())

    def bindings_to_queue(self, queue: str) -> list[Binding]:
        return list(self._to_queue.get(queue, {}).values())

    def policy_for(self, entity: Exchange | Queue) -> Policy | None:
        """The policy in force for an exchange or queue, if any (see ferrymq.amqp.policies)."""
        return self._policies.policy_for(entity)

    def alternate_exchange(self, exchange: Exchange) -> str | None:
        return self._policies.alternate_exchange(exchange)

    @property
    def policies_version(self) -> int:
        """Moves whenever a policy of the vhost is put or deleted (a queue's settings depend only on
        its own arguments and the policies)."""
        return self._policies.version

    def effective_queue_args(self, queue: Queue) -> dict[str, Any]:
        """message_ttl, expires, max_length, max_length_bytes, overflow, dead_letter_exchange,
        dead_letter_routing_key, max_priority, single_active_consumer and delivery_limit, those set,
        from the queue's x-arguments and its policy as RabbitMQ combines them."""
        return self._policies.queue_settings(queue)

    # -- routing ----------------------------------------------------------------------------------

    def route(self, exchange: str, routing_key: str, headers: Headers | None = None) -> RouteResult:
        """Where basic.publish to `exchange` with `routing_key` and `headers` goes."""
        cacheable = not headers or ("CC" not in headers and "BCC" not in headers)
        if cacheable:
            known = self._routes.get((exchange, routing_key))
            if known is not None:
                return known
        found = self._exchanges.get(exchange)
        if found is None:
            if exchange != "":
                return _publish_error(ReplyCode.NOT_FOUND, f"no {resource('exchange', exchange, self.vhost)}")
            found = Exchange(vhost=self.vhost, name="")  # always there in RabbitMQ
        if found.internal:
            reason = f"cannot publish to internal {resource('exchange', exchange, self.vhost)}"
            return _publish_error(ReplyCode.ACCESS_REFUSED, reason)
        keys, refused = routing_keys(routing_key, headers)
        if refused is not None:
            return refused
        queues, uses_headers = self._walk(found, keys, headers)
        result = RouteResult(queues)
        if cacheable and not uses_headers:
            if len(self._routes) >= ROUTE_CACHE_SIZE:
                self._routes.popitem(last=False)
            self._routes[(exchange, routing_key)] = result
        return result

    def _matcher(self, exchange: Exchange) -> Matcher:
        matcher = self._matchers.get(exchange.name)
        if matcher is None:
            bindings = self._from.get(exchange.name, {}).values()
            matcher = self._matchers[exchange.name] = matcher_for(exchange.name, exchange.type, bindings)
        return matcher

    def _alternate(self, exchange: Exchange) -> str | None:
        if exchange.name not in self._alternates:
            self._alternates[exchange.name] = self._policies.alternate_exchange(exchange)
        return self._alternates[exchange.name]

    def _walk(
        self, start: Exchange, keys: Sequence[str], headers: Headers | None
    ) -> tuple[tuple[Queue, ...], bool]:
        """(queues, whether any exchange on the way looked at headers), breadth first from `start`."""
        queues: dict[str, Queue] = {}
        seen = {start.name}
        work = deque([start])
        uses_headers = False
        while work:
            exchange = work.popleft()
            matcher = self._matcher(exchange)
            uses_headers = uses_headers or matcher.uses_headers
            destinations = matcher.match(keys, headers)
            if not destinations:
                alternate = self._alternate(exchange)
                destinations = (("exchange", alternate),) if alternate is not None else ()
            for kind, name in destinations:
                if kind == "queue":
                    queue = self._queues.get(name)
                    if queue is not None and name not in queues:
                        queues[name] = queue
                elif name not in seen:
                    seen.add(name)
                    target = self._exchanges.get(name)
                    if target is not None:
                        work.append(target)
        return tuple(queues.values()), uses_headers
