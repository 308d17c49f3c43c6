"""How each exchange type picks the destinations of one message from its bindings: RabbitMQ's direct,
fanout, topic and headers rules (checked against RabbitMQ 3.10.8 in tests/amqp/test_topology.py).

A matcher is built once from an exchange's bindings and then only read, so a gateway rebuilds the
one exchange whose bindings changed. A destination is (destination_type, name), in binding order."""

from __future__ import annotations

import datetime
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from ferrymq.meta.entities import Arguments, Binding
from ferrymq.meta.equivalence import amqp_type

Destination = tuple[str, str]  # ("queue" | "exchange", name)
Headers = Mapping[str, Any]
TOPIC_CACHE_SIZE = 4096  # routing keys remembered per topic exchange


def _unique(found: Iterable[Destination]) -> tuple[Destination, ...]:
    return tuple(dict.fromkeys(found))


def _destination(binding: Binding) -> Destination:
    return (binding.destination_type, binding.destination)


class Matcher:
    """The destinations for a message's routing keys (the key, then CC and BCC) and headers."""

    uses_headers = False  # whether the answer depends on the headers (else it can be cached by key)

    def match(self, keys: Sequence[str], headers: Headers | None) -> tuple[Destination, ...]:
        raise NotImplementedError


class DefaultMatcher(Matcher):
    """The default exchange "": every queue is bound to it by its own name."""

    def match(self, keys: Sequence[str], headers: Headers | None) -> tuple[Destination, ...]:
        return _unique(("queue", key) for key in keys)


class DirectMatcher(Matcher):
    def __init__(self, bindings: Iterable[Binding]) -> None:
        by_key: dict[str, list[Destination]] = {}
        for binding in bindings:
            by_key.setdefault(binding.routing_key, []).append(_destination(binding))
        self._by_key = {key: _unique(found) for key, found in by_key.items()}

    def match(self, keys: Sequence[str], headers: Headers | None) -> tuple[Destination, ...]:
        if len(keys) == 1:
            return self._by_key.get(keys[0], ())
        return _unique(d for key in keys for d in self._by_key.get(key, ()))


class FanoutMatcher(Matcher):
    def __init__(self, bindings: Iterable[Binding]) -> None:
        self._all = _unique(_destination(b) for b in bindings)

    def match(self, keys: Sequence[str], headers: Headers | None) -> tuple[Destination, ...]:
        return self._all


def topic_words(key: str) -> list[str]:
    """RabbitMQ's split of a routing or binding key: "" has no words, "a..b" three ("a", "", "b")."""
    return key.split(".") if key else []


class _Node:
    __slots__ = ("destinations", "hash", "star", "words")

    def __init__(self) -> None:
        self.words: dict[str, _Node] = {}
        self.star: _Node | None = None
        self.hash: _Node | None = None
        self.destinations: list[Destination] = []

    def child(self, word: str) -> _Node:
        if word == "*":
            self.star = self.star or _Node()
            return self.star
        if word == "#":
            self.hash = self.hash or _Node()
            return self.hash
        return self.words.setdefault(word, _Node())


class TopicMatcher(Matcher):
    """A trie of binding words ('*' one word, '#' zero or more): one message walks it in O(words) for
    patterns without '#', and each (node, position) at most once with them. Answers are cached per
    routing key, up to TOPIC_CACHE_SIZE keys (the oldest goes first)."""

    def __init__(self, bindings: Iterable[Binding]) -> None:
        self._root = _Node()
        for binding in bindings:
            node = self._root
            for word in topic_words(binding.routing_key):
                node = node.child(word)
            node.destinations.append(_destination(binding))
        self._cache: OrderedDict[str, tuple[Destination, ...]] = OrderedDict()

    def match(self, keys: Sequence[str], headers: Headers | None) -> tuple[Destination, ...]:
        if len(keys) == 1:
            return self._match_key(keys[0])
        return _unique(d for key in keys for d in self._match_key(key))

    def _match_key(self, key: str) -> tuple[Destination, ...]:
        found = self._cache.get(key)
        if found is None:
            out: list[Destination] = []
            self._walk(self._root, topic_words(key), 0, out, set())
            found = _unique(out)
            if len(self._cache) >= TOPIC_CACHE_SIZE:
                self._cache.popitem(last=False)
            self._cache[key] = found
        return found

    def _walk(
        self, node: _Node, words: list[str], at: int, out: list[Destination], seen: set[tuple[int, int]]
    ) -> None:
        visit = (id(node), at)
        if visit in seen:
            return
        seen.add(visit)
        if node.hash is not None:
            for rest in range(at, len(words) + 1):  # '#' takes zero or more words
                self._walk(node.hash, words, rest, out, seen)
        if at == len(words):
            out.extend(node.destinations)
            return
        child = node.words.get(words[at])
        if child is not None:
            self._walk(child, words, at + 1, out, seen)
        if node.star is not None:
            self._walk(node.star, words, at + 1, out, seen)


_VOID = object()  # a binding argument without a value: the header need only be present
_MATCH_KINDS = {
    "all": (False, False),
    "any": (True, False),
    "all-with-x": (False, True),
    "any-with-x": (True, True),
}  # x-match → (any, compare x- headers); anything else counts as "all", as in RabbitMQ


def _erlang_value(value: Any) -> tuple[str, Any]:
    """A header value as RabbitMQ compares it (Erlang's ==, types ignored but its own): every integer
    and float is a number, a timestamp is its seconds, strings and byte arrays are binaries, booleans
    and decimals are only themselves."""
    if isinstance(value, bool):
        return "bool", value
    if isinstance(value, int | float):
        return "number", value
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return "number", int(value.timestamp())
    if isinstance(value, str):
        return "binary", value.encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return "binary", bytes(value)
    if isinstance(value, Decimal):
        return "decimal", value.as_tuple()
    return type(value).__name__, value


class _HeadersBinding:
    __slots__ = ("any", "destination", "pairs")

    def __init__(self, binding: Binding) -> None:
        kind = binding.arguments.get("x-match")
        self.any, with_x = _MATCH_KINDS.get(kind, (False, False)) if isinstance(kind, str) else (False, False)
        self.pairs = tuple(
            (name, _VOID if value is None else _erlang_value(value))
            for name, value in binding.arguments.items()
            if name != "x-match" and (with_x or not name.startswith("x-"))
        )
        self.destination = _destination(binding)

    def matches(self, headers: Mapping[str, tuple[str, Any]]) -> bool:
        """`headers` with values as _erlang_value gives them."""
        for name, expected in self.pairs:
            hit = name in headers and (expected is _VOID or headers[name] == expected)
            if hit and self.any:
                return True
            if not hit and not self.any:
                return False
        return not self.any


def binding_problem(exchange_type: str, arguments: Arguments) -> str | None:
    """Why RabbitMQ refuses a binding with these arguments (406 PRECONDITION_FAILED), if it does: only
    a headers exchange checks them, for x-match."""
    kind = arguments.get("x-match")
    if exchange_type != "headers" or kind is None or kind in _MATCH_KINDS:
        return None
    if not isinstance(kind, str):
        return f"Invalid x-match field type {amqp_type(kind)} (value {kind}); expected longstr"
    return f'Invalid x-match field value <<"{kind}">>; expected all, any, all-with-x, or any-with-x'


class HeadersMatcher(Matcher):
    """x-match all (default) / any, and all-with-x / any-with-x which also compare "x-" headers."""

    uses_headers = True

    def __init__(self, bindings: Iterable[Binding]) -> None:
        self._bindings = [_HeadersBinding(b) for b in bindings]

    def match(self, keys: Sequence[str], headers: Headers | None) -> tuple[Destination, ...]:
        present = {name: _erlang_value(value) for name, value in headers.items()} if headers else {}
        return _unique(b.destination for b in self._bindings if b.matches(present))


MATCHERS: dict[str, type[DirectMatcher | FanoutMatcher | TopicMatcher | HeadersMatcher]] = {
    "direct": DirectMatcher,
    "fanout": FanoutMatcher,
    "topic": TopicMatcher,
    "headers": HeadersMatcher,
}


def matcher_for(exchange_name: str, exchange_type: str, bindings: Iterable[Binding]) -> Matcher:
    """The matcher of an exchange; an unknown type (which the store refuses to declare) routes nothing."""
    if exchange_name == "":
        return DefaultMatcher()
    cls = MATCHERS.get(exchange_type)
    return cls(bindings) if cls is not None else FanoutMatcher(())
