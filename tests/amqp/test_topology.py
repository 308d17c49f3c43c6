"""The routing view of a vhost: RabbitMQ's exchange types (the tables below are what RabbitMQ 3.10.8
answered, and are asked of the machine's RabbitMQ again when it runs), exchange-to-exchange bindings,
alternate exchanges, publish errors, policies, and keeping current from the metadata change log."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.amqp.matching import binding_problem, topic_words
from ferrymq.amqp.queue_settings import SettingsCache
from ferrymq.amqp.topology import ROUTE_CACHE_SIZE, Topology
from ferrymq.meta.database import make_engine
from ferrymq.meta.entities import Binding, Change, Exchange, Policy, Queue, Snapshot, Vhost
from ferrymq.meta.store import DEFAULT_EXCHANGES, MetaStore
from ferrymq.protocol.amqp.errors import ReplyCode
from tests.amqp.conftest import CLIENTS, SCENARIO_TIMEOUT, Endpoint

VHOST = "/"

# binding key → the routing keys (of TOPIC_KEYS) RabbitMQ 3.10.8 delivered through it
TOPIC_KEYS = ["", ".", "a", "a.", ".a", "a.b", "a..b", "a.x.b", "a.x.y.b", "b.a", "a.a"]
TOPIC_MATCHES = {
    "*": ["a"],
    "#": TOPIC_KEYS,
    "#.#": TOPIC_KEYS,
    "a.#": ["a", "a.", "a.b", "a..b", "a.x.b", "a.x.y.b", "a.a"],
    "#.a": ["a", ".a", "b.a", "a.a"],
    "a.*": ["a.", "a.b", "a.a"],
    "a..b": ["a..b"],
    "a.*.b": ["a..b", "a.x.b"],
    "": [""],
    "*.*": [".", "a.", ".a", "a.b", "b.a", "a.a"],
    "a.#.b": ["a.b", "a..b", "a.x.b", "a.x.y.b"],
    "#.#.a": ["a", ".a", "b.a", "a.a"],
}

# (binding arguments, [(message headers, routed?)]) as RabbitMQ 3.10.8 answered
HEADERS_MATCHES: list[tuple[dict[str, Any], list[tuple[dict[str, Any] | None, bool]]]] = [
    ({"x-match": "all", "a": 1, "b": "x"}, [({"a": 1, "b": "x"}, True), ({"a": 1}, False), (None, False)]),
    ({"x-match": "any", "a": 1, "b": "x"}, [({"a": 2, "b": "x"}, True), ({"a": 2}, False), ({}, False)]),
    ({"a": 1}, [({"a": 1, "c": 3}, True), ({}, False)]),  # no x-match: all
    ({"x-match": "all"}, [({}, True), (None, True)]),  # nothing to compare: all holds
    ({"x-match": "any"}, [({"a": 1}, False)]),
    ({"x-match": "all", "x-foo": "1"}, [({"x-foo": "2"}, True), ({}, True)]),  # x- arguments ignored
    ({"x-match": "any", "x-foo": "1"}, [({"x-foo": "1"}, False), ({}, False)]),
    ({"x-match": "all-with-x", "x-foo": "1"}, [({"x-foo": "1"}, True), ({"x-foo": "2"}, False), ({}, False)]),
    (
        {"x-match": "any-with-x", "x-foo": "1", "a": 1},
        [({"x-foo": "1"}, True), ({"a": 1}, True), ({}, False)],
    ),
    (
        {"x-match": "all", "a": 1},
        [({"a": 1}, True), ({"a": "1"}, False), ({"a": True}, False), ({"a": 2**40}, False)],
    ),
    ({"x-match": "all", "a": True}, [({"a": 1}, False), ({"a": True}, True)]),
    (
        {"x-match": "all", "a": None},
        [({"a": 5}, True), ({"a": None}, True), ({"b": 1}, False)],
    ),  # void: presence
    ({"x-match": "any", "a": None, "b": 2}, [({"a": "x"}, True), ({"b": 2}, True), ({"c": 1}, False)]),
]


def _one_exchange(kind: str, bindings: list[dict], messages: list[dict], expect: list[list[int]]) -> dict:
    """A case of exchange "x" with queue q{i} bound by bindings[i]; expect names queues by index."""
    return {
        "name": kind,
        "exchanges": [{"name": "x", "type": kind}],
        "queues": [f"q{i}" for i in range(len(bindings))],
        "bindings": [{"source": "x", "destination": f"q{i}", **b} for i, b in enumerate(bindings)],
        "messages": [{"exchange": "x", **m} for m in messages],
        "expect": [sorted(f"q{i}" for i in hits) for hits in expect],
    }


def _fanout(name: str, **arguments: Any) -> dict:
    return {"name": name, "type": "fanout", "arguments": arguments}


def _graph_cases() -> list[dict[str, Any]]:
    """Several exchanges: exchange-to-exchange bindings, alternate exchanges, CC and BCC."""
    return [
        {
            "name": "exchange-bindings",  # q1 is reached three ways and gets one copy
            "exchanges": [_fanout("a"), {"name": "b", "type": "direct"}, {"name": "c", "type": "topic"}],
            "queues": ["q1", "q2"],
            "bindings": [
                {"source": "a", "destination": "b", "kind": "exchange"},
                {"source": "a", "destination": "c", "kind": "exchange", "key": "ignored by fanout"},
                {"source": "b", "destination": "q1", "key": "k"},
                {"source": "c", "destination": "q1", "key": "#"},
                {"source": "c", "destination": "q2", "key": "k.#"},
                {"source": "a", "destination": "q2"},
            ],
            "messages": [
                {"exchange": "a", "key": "k"},
                {"exchange": "b", "key": "k"},
                {"exchange": "c", "key": "z"},
            ],
            "expect": [["q1", "q2"], ["q1"], ["q1"]],
        },
        {
            "name": "cycle",
            "exchanges": [_fanout("a"), _fanout("b")],
            "queues": ["q"],
            "bindings": [
                {"source": "a", "destination": "b", "kind": "exchange"},
                {"source": "b", "destination": "a", "kind": "exchange"},
                {"source": "b", "destination": "q"},
            ],
            "messages": [{"exchange": "a", "key": ""}, {"exchange": "b", "key": ""}],
            "expect": [["q"], ["q"]],
        },
        {
            "name": "topic-to-topic",  # the message keeps its key from exchange to exchange
            "exchanges": [{"name": "t1", "type": "topic"}, {"name": "t2", "type": "topic"}],
            "queues": ["q"],
            "bindings": [
                {"source": "t1", "destination": "t2", "kind": "exchange", "key": "a.*"},
                {"source": "t2", "destination": "q", "key": "#.b"},
            ],
            "messages": [{"exchange": "t1", "key": k} for k in ("a.b", "a.c", "x.b")],
            "expect": [["q"], [], []],
        },
        {
            "name": "headers-to-fanout",
            "exchanges": [{"name": "h", "type": "headers"}, _fanout("f")],
            "queues": ["q"],
            "bindings": [
                {
                    "source": "h",
                    "destination": "f",
                    "kind": "exchange",
                    "arguments": {"x-match": "any", "a": 1},
                },
                {"source": "f", "destination": "q"},
            ],
            "messages": [{"exchange": "h", "key": "", "headers": h} for h in ({"a": 1}, {"a": 2}, None)],
            "expect": [["q"], [], []],
        },
        {
            "name": "alternate",
            "exchanges": [
                {"name": "d", "type": "direct", "arguments": {"alternate-exchange": "ae"}},
                _fanout("ae"),
            ],
            "queues": ["q", "lost"],
            "bindings": [
                {"source": "d", "destination": "q", "key": "k"},
                {"source": "ae", "destination": "lost"},
            ],
            "messages": [{"exchange": "d", "key": "k"}, {"exchange": "d", "key": "z"}],
            "expect": [["q"], ["lost"]],
        },
        {
            "name": "alternate-not-for-an-exchange-that-routed",  # a routed to "empty", which routes nowhere
            "exchanges": [_fanout("a", **{"alternate-exchange": "ae"}), _fanout("empty"), _fanout("ae")],
            "queues": ["lost"],
            "bindings": [
                {"source": "a", "destination": "empty", "kind": "exchange"},
                {"source": "ae", "destination": "lost"},
            ],
            "messages": [{"exchange": "a", "key": ""}],
            "expect": [[]],
        },
        {
            "name": "alternate-chain-and-cycle",
            "exchanges": [
                {"name": "a", "type": "direct", "arguments": {"alternate-exchange": "b"}},
                {"name": "b", "type": "direct", "arguments": {"alternate-exchange": "c"}},
                {"name": "c", "type": "direct", "arguments": {"alternate-exchange": "a"}},
            ],
            "queues": ["q"],
            "bindings": [{"source": "c", "destination": "q", "key": "k"}],
            "messages": [
                {"exchange": "a", "key": "k"},
                {"exchange": "a", "key": "z"},
                {"exchange": "b", "key": "z"},
            ],
            "expect": [["q"], [], []],
        },
        {
            "name": "cc-bcc",
            "exchanges": [{"name": "d", "type": "direct"}, {"name": "t", "type": "topic"}],
            "queues": ["main", "cc", "bcc", "q1", "q2"],
            "bindings": [
                {"source": "d", "destination": "q1", "key": "k1"},
                {"source": "d", "destination": "q2", "key": "k2"},
                {"source": "t", "destination": "q1", "key": "*.one"},
            ],
            "messages": [
                {
                    "exchange": "",
                    "key": "main",
                    "to_queue": True,
                    "headers": {"CC": ["cc", "main"], "BCC": ["bcc"]},
                },
                {"exchange": "d", "key": "k1", "headers": {"CC": ["k2", "k1"]}},
                {"exchange": "d", "key": "none", "headers": {"BCC": ["k2"]}},
                {"exchange": "t", "key": "a.b", "headers": {"CC": ["x.one", "y.one"]}},
            ],
            "expect": [["bcc", "cc", "main"], ["q1", "q2"], ["q2"], ["q1"]],
        },
        {
            "name": "default-exchange",
            "queues": ["q"],
            "messages": [
                {"exchange": "", "key": "q", "to_queue": True},
                {"exchange": "", "key": "missing", "to_queue": True},
            ],
            "expect": [["q"], []],
        },
    ]


def _cases() -> list[dict[str, Any]]:
    """The tables above as routing cases, and the graph cases."""
    topic = _one_exchange(
        "topic",
        [{"key": key} for key in TOPIC_MATCHES],
        [{"key": key} for key in TOPIC_KEYS],
        [[i for i, hits in enumerate(TOPIC_MATCHES.values()) if key in hits] for key in TOPIC_KEYS],
    )
    headers = [
        _one_exchange(
            "headers",
            [{"arguments": arguments}],
            [{"key": "", "headers": h} for h, _ in messages],
            [[0] if routed else [] for _, routed in messages],
        )
        for arguments, messages in HEADERS_MATCHES
    ]
    direct = _one_exchange(
        "direct",
        [{"key": "a"}, {"key": "a"}, {"key": "b"}, {"key": ""}],
        [{"key": k} for k in ("a", "b", "", "c", "a.b")],
        [[0, 1], [2], [3], [], []],
    )
    fanout = _one_exchange(
        "fanout", [{"key": "x"}, {"key": ""}], [{"key": "anything"}, {"key": ""}], [[0, 1], [0, 1]]
    )
    return [topic, *headers, direct, fanout, *_graph_cases()]


def _topology_of(case: dict[str, Any]) -> Topology:
    exchanges = [
        Exchange(vhost=VHOST, name=x["name"], type=x["type"], arguments=x.get("arguments", {}))
        for x in case.get("exchanges", [])
    ]
    bindings = [
        Binding(
            vhost=VHOST,
            source=b["source"],
            destination=b["destination"],
            destination_type=b.get("kind", "queue"),
            routing_key=b.get("key", ""),
            arguments=b.get("arguments", {}),
        )
        for b in case.get("bindings", [])
    ]
    return _topology(exchanges, _queues(*case["queues"]), bindings)


def _topology(
    exchanges: list[Exchange] = (),  # type: ignore[assignment]
    queues: list[Queue] = (),  # type: ignore[assignment]
    bindings: list[Binding] = (),  # type: ignore[assignment]
    policies: list[Policy] = (),  # type: ignore[assignment]
) -> Topology:
    defaults = [Exchange(vhost=VHOST, name=n, type=t, internal=i) for n, t, i in DEFAULT_EXCHANGES]
    return Topology.from_snapshot(
        Snapshot(
            vhost=Vhost(name=VHOST),
            version=1,
            exchanges=[*defaults, *exchanges],
            queues=list(queues),
            bindings=list(bindings),
            policies=list(policies),
            permissions=[],
        )
    )


def _routed(topology: Topology, exchange: str, key: str = "", headers: dict | None = None) -> list[str]:
    result = topology.route(exchange, key, headers)
    assert result.error is None, result.error
    assert result.routed == bool(result.queues)
    return [q.name for q in result.queues]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["name"])
def test_routing_is_rabbitmqs(case):
    topology = _topology_of(case)
    got = [sorted(_routed(topology, m["exchange"], m["key"], m.get("headers"))) for m in case["messages"]]
    assert got == case["expect"]


def test_the_cases_hold_on_rabbitmq(rabbitmq: Endpoint, pika_python):
    """The same cases on the machine's RabbitMQ: it routes as the cases expect."""
    cases = _cases()
    done = subprocess.run(
        [str(pika_python), str(CLIENTS / "pika_routing.py"), rabbitmq.host, str(rabbitmq.port)],
        input=json.dumps([{k: v for k, v in c.items() if k != "expect"} for c in cases]),
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == [c["expect"] for c in cases]


# -- the default exchange, publish errors ------------------------------------------------------------


def test_default_exchange_routes_to_the_queue_named_by_the_key():
    topology = _topology(queues=[Queue(vhost=VHOST, name="orders")])
    assert _routed(topology, "", "orders") == ["orders"]
    assert not topology.route("", "missing").routed
    assert topology.route("", "missing").error is None


def test_default_exchange_is_there_even_if_the_snapshot_lacks_it():
    topology = Topology.from_snapshot(
        Snapshot(
            vhost=Vhost(name="v"),
            version=0,
            exchanges=[],
            queues=[Queue(vhost="v", name="q")],
            bindings=[],
            policies=[],
            permissions=[],
        )
    )
    assert _routed(topology, "", "q") == ["q"]


def test_unknown_exchange_is_404_with_rabbitmqs_text():
    error = _topology().route("nope", "k").error
    assert error is not None and error.code == ReplyCode.NOT_FOUND
    assert error.reply_text == "NOT_FOUND - no exchange 'nope' in vhost '/'"
    assert (error.class_id, error.method_id) == (60, 40)
    assert not _topology().route("amq.default", "k").routed  # no alias in RabbitMQ 3.10 either


@pytest.mark.parametrize("name", ["amq.rabbitmq.trace", "hidden"])
def test_internal_exchange_refuses_publishing_with_rabbitmqs_text(name):
    topology = _topology([Exchange(vhost=VHOST, name="hidden", type="fanout", internal=True)])
    error = topology.route(name, "k").error
    assert error is not None and error.code == ReplyCode.ACCESS_REFUSED
    assert error.reply_text == f"ACCESS_REFUSED - cannot publish to internal exchange '{name}' in vhost '/'"


def test_internal_exchange_routes_what_reaches_it_through_a_binding():
    topology = _topology(
        [
            Exchange(vhost=VHOST, name="front", type="fanout"),
            Exchange(vhost=VHOST, name="in", type="fanout", internal=True),
        ],
        [Queue(vhost=VHOST, name="q")],
        [_bind("front", "in", kind="exchange"), _bind("in", "q")],
    )
    assert _routed(topology, "front") == ["q"]


def _bind(source: str, destination: str, key: str = "", kind: str = "queue", **arguments: Any) -> Binding:
    return Binding(
        vhost=VHOST,
        source=source,
        destination=destination,
        destination_type=kind,
        routing_key=key,  # type: ignore[arg-type]
        arguments=arguments,
    )


def _fanouts(*names: str, **arguments: dict) -> list[Exchange]:
    return [Exchange(vhost=VHOST, name=n, type="fanout", arguments=arguments.get(n, {})) for n in names]


def _queues(*names: str) -> list[Queue]:
    return [Queue(vhost=VHOST, name=n) for n in names]


# -- exchange-to-exchange bindings and alternate exchanges -----------------------------------------------


def test_exchange_bindings_are_followed_and_a_queue_gets_one_copy():
    topology = _topology(
        _fanouts("a", "b", "c"),
        _queues("q1", "q2"),
        [
            _bind("a", "b", kind="exchange"),
            _bind("a", "c", kind="exchange"),
            _bind("b", "q1"),
            _bind("c", "q1"),
            _bind("c", "q2"),
            _bind("a", "q2"),
        ],
    )
    assert _routed(topology, "a") == ["q2", "q1"]


def test_bindings_to_missing_queues_and_exchanges_route_nothing():
    topology = _topology(_fanouts("a"), [], [_bind("a", "gone"), _bind("a", "gone-x", kind="exchange")])
    assert topology.route("a", "").routed is False


def test_alternate_exchange_from_a_policy_and_the_argument_wins():
    policy = Policy(
        vhost=VHOST, name="ae", pattern="^d", apply_to="exchanges", definition={"alternate-exchange": "p"}
    )
    topology = _topology(
        [
            Exchange(vhost=VHOST, name="d1", type="direct"),
            Exchange(vhost=VHOST, name="d2", type="direct", arguments={"alternate-exchange": "arg"}),
            *_fanouts("p", "arg"),
        ],
        _queues("from-policy", "from-argument"),
        [_bind("p", "from-policy"), _bind("arg", "from-argument")],
        [policy],
    )
    assert _routed(topology, "d1", "k") == ["from-policy"]
    assert _routed(topology, "d2", "k") == ["from-argument"]
    assert topology.alternate_exchange(topology.exchange("d1")) == "p"  # type: ignore[arg-type]


# -- sender-selected distribution ---------------------------------------------------------------------


def test_cc_and_bcc_headers_add_routing_keys():
    topology = _topology(queues=_queues("main", "cc", "bcc"))
    routed = _routed(topology, "", "main", {"CC": ["cc", "main"], "BCC": ["bcc", 7]})
    assert routed == ["main", "cc", "bcc"]


def test_cc_that_is_not_an_array_fails_the_publish_as_in_rabbitmq():
    error = _topology(queues=_queues("q")).route("", "q", {"CC": "q"}).error
    assert error is not None and error.code == ReplyCode.PRECONDITION_FAILED
    assert (
        error.reply_text
        == 'PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"CC",longstr}'
    )


# -- caching ---------------------------------------------------------------------------------------


def _change(version: int, kind: str, op: str, entity: Any) -> Change:
    return Change(scope=VHOST, version=version, kind=kind, op=op, value=msgspec.to_builtins(entity))  # type: ignore[arg-type]


def test_a_change_reaches_routes_answered_before_it():
    topology = _topology(
        [Exchange(vhost=VHOST, name="d", type="direct")], _queues("q1", "q2"), [_bind("d", "q1", "k")]
    )
    assert _routed(topology, "d", "k") == ["q1"]
    assert topology.apply(_change(2, "binding", "put", _bind("d", "q2", "k")))
    assert _routed(topology, "d", "k") == ["q1", "q2"]
    assert topology.apply(_change(3, "queue", "delete", Queue(vhost=VHOST, name="q1")))
    assert _routed(topology, "d", "k") == ["q2"]
    assert topology.bindings_to_queue("q1") == []


def test_headers_routes_are_not_cached_by_key():
    topology = _topology(
        [Exchange(vhost=VHOST, name="h", type="headers")],
        _queues("q"),
        [_bind("h", "q", **{"x-match": "all", "a": 1})],
    )
    assert _routed(topology, "h", "k", {"a": 1}) == ["q"]
    assert _routed(topology, "h", "k", {"a": 2}) == []
    assert _routed(topology, "h", "k") == []


def test_the_route_cache_is_bounded():
    topology = _topology(queues=_queues("q"))
    for n in range(ROUTE_CACHE_SIZE + 10):
        topology.route("", f"k{n}")
    assert len(topology._routes) == ROUTE_CACHE_SIZE
    assert _routed(topology, "", "q") == ["q"]


# -- keeping current from the metadata store's change log ------------------------------------------


@pytest.fixture
def store(tmp_path) -> MetaStore:
    made = MetaStore(make_engine(f"sqlite:///{tmp_path}/meta.db"))
    made.ensure_defaults()
    return made


def _all_routes(topology: Topology, keys: list[str]) -> dict[tuple[str, str], list[str]]:
    return {
        (x.name, key): sorted(q.name for q in topology.route(x.name, key).queues)
        for x in topology.exchanges()
        if not x.internal
        for key in keys
    }


def test_the_change_log_brings_a_snapshot_to_the_store_state(store):
    start = Topology.from_snapshot(store.snapshot(VHOST))
    store.declare_exchange(Exchange(vhost=VHOST, name="t", type="topic"))
    store.declare_exchange(Exchange(vhost=VHOST, name="gone", type="fanout"))
    for name in ("q1", "q2", "q3"):
        store.declare_queue(Queue(vhost=VHOST, name=name))
    store.bind(Binding(vhost=VHOST, source="t", destination="q1", routing_key="a.*"))
    store.bind(
        Binding(vhost=VHOST, source="t", destination="gone", destination_type="exchange", routing_key="#")
    )
    store.bind(Binding(vhost=VHOST, source="gone", destination="q2"))
    store.bind(Binding(vhost=VHOST, source="amq.fanout", destination="q3"))
    store.put_policy(
        Policy(vhost=VHOST, name="ttl", pattern="^q", apply_to="queues", definition={"message-ttl": 5})
    )
    start.route("t", "a.b")  # cached before the deletions below
    store.delete_exchange(VHOST, "gone")
    store.delete_queue(VHOST, "q3")
    changes = store.changes(VHOST, start.version)
    for change in changes.changes:
        assert start.apply(change)
    assert not start.apply(changes.changes[-1])  # seen already
    final = Topology.from_snapshot(store.snapshot(VHOST))
    assert start.version == final.version == changes.version
    keys = ["a.b", "a", "x", "q1"]
    assert _all_routes(start, keys) == _all_routes(final, keys)
    assert _all_routes(start, keys)[("t", "a.b")] == ["q1"]
    assert start.bindings_from("t") == final.bindings_from("t")
    assert start.bindings_to_queue("q1") == final.bindings_to_queue("q1")
    assert start.effective_queue_args(start.queue("q1")) == {"message_ttl": 5}  # type: ignore[arg-type]


def test_vhost_deletion_empties_the_topology(store):
    store.declare_queue(Queue(vhost=VHOST, name="q"))
    topology = Topology.from_snapshot(store.snapshot(VHOST))
    version = topology.version
    store.delete_vhost(VHOST)
    for change in store.changes(VHOST, version).changes:
        topology.apply(change)
    assert topology.queue("q") is None and topology.exchanges() == []


def test_a_change_of_another_vhost_is_refused():
    with pytest.raises(ValueError, match="scope 'other'"):
        _topology().apply(
            Change(scope="other", version=9, kind="queue", op="put", value={"vhost": "other", "name": "q"})
        )


# -- policies --------------------------------------------------------------------------------------


def _policy(name: str, pattern: str, priority: int = 0, apply_to: str = "all", **definition: Any) -> Policy:
    return Policy(
        vhost=VHOST, name=name, pattern=pattern, priority=priority, apply_to=apply_to, definition=definition
    )  # type: ignore[arg-type]


def test_the_highest_priority_matching_policy_applies():
    topology = _topology(
        policies=[
            _policy("low", "^orders", 1),
            _policy("high", "ders", 5),
            _policy("exchanges-only", ".*", 9, "exchanges"),
            _policy("bad-pattern", "(", 10),
            _policy("b-tie", "^o", 5),
        ]
    )
    queue = Queue(vhost=VHOST, name="orders")
    assert topology.policy_for(queue).name == "b-tie"  # type: ignore[union-attr]
    assert topology.policy_for(Exchange(vhost=VHOST, name="orders")).name == "exchanges-only"  # type: ignore[union-attr]
    assert topology.policy_for(Queue(vhost=VHOST, name="x")) is None


def test_queue_arguments_and_policy_combine_as_in_rabbitmq():
    policy = _policy(
        "p",
        ".*",
        **{
            "message-ttl": 1000,
            "expires": 50,
            "max-length": 10,
            "max-length-bytes": 99,
            "delivery-limit": 3,
            "overflow": "reject-publish",
            "dead-letter-exchange": "pdlx",
            "dead-letter-routing-key": "pkey",
            "max-priority": 9,
            "single-active-consumer": True,
        },
    )
    queue = Queue(
        vhost=VHOST,
        name="q",
        arguments={
            "x-message-ttl": 5000,
            "x-expires": 20,
            "x-max-length": 100,
            "x-overflow": "drop-head",
            "x-dead-letter-exchange": "adlx",
            "x-max-priority": 4,
            "x-single-active-consumer": False,
            "x-max-length-bytes": "bad",
        },
    )
    assert _topology(policies=[policy]).effective_queue_args(queue) == {
        "message_ttl": 1000,  # the lower one
        "expires": 20,
        "max_length": 10,
        "max_length_bytes": 99,  # the argument is ill-typed: the policy's
        "delivery_limit": 3,
        "overflow": "drop-head",  # the argument's
        "dead_letter_exchange": "adlx",
        "dead_letter_routing_key": "pkey",
        "max_priority": 4,  # arguments only: no such policy key
        "single_active_consumer": False,
    }
    assert _topology().effective_queue_args(Queue(vhost=VHOST, name="plain")) == {}


# -- properties ------------------------------------------------------------------------------------


def _topic_reference(pattern: list[str], words: list[str]) -> bool:
    """'*' is one word, '#' any number: the definition, without a trie."""
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(_topic_reference(rest, words[i:]) for i in range(len(words) + 1))
    return bool(words) and head in ("*", words[0]) and _topic_reference(rest, words[1:])


_word = st.sampled_from(["a", "b", ""])
_key = st.lists(_word, max_size=5).map(".".join)
_pattern = st.lists(st.sampled_from(["a", "b", "", "*", "#"]), max_size=5).map(".".join)


@settings(max_examples=300, deadline=None)
@given(patterns=st.lists(_pattern, min_size=1, max_size=8), keys=st.lists(_key, min_size=1, max_size=8))
def test_topic_routing_is_the_definition(patterns, keys):
    topology = _topology_of(_one_exchange("topic", [{"key": p} for p in patterns], [], []))
    for key in keys * 2:  # the second time from the cache
        expected = [
            f"q{i}" for i, p in enumerate(patterns) if _topic_reference(topic_words(p), topic_words(key))
        ]
        assert sorted(_routed(topology, "x", key)) == sorted(expected), (patterns, key)


@settings(max_examples=200, deadline=None)
@given(
    edges=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.booleans()), max_size=12),
    alternates=st.dictionaries(st.integers(0, 4), st.integers(0, 4), max_size=3),
)
def test_any_graph_of_fanouts_routes_to_what_reaches_it(edges, alternates):
    """Fanout exchanges x0..x4 bound to each other and to queues q0..q4, with alternates: a queue gets
    the message once if a path of bindings reaches it, alternates taken only from exchanges without
    bindings."""
    exchanges = [
        Exchange(
            vhost=VHOST,
            name=f"x{i}",
            type="fanout",
            arguments={"alternate-exchange": f"x{alternates[i]}"} if i in alternates else {},
        )
        for i in range(5)
    ]
    bindings = [
        _bind(f"x{a}", f"{'x' if to_x else 'q'}{b}", kind="exchange" if to_x else "queue")
        for a, b, to_x in edges
    ]
    topology = _topology(exchanges, _queues(*(f"q{i}" for i in range(5))), bindings)
    for start in range(5):
        reached, todo = {start}, [start]
        while todo:
            x = todo.pop()
            out = [(b, to_x) for a, b, to_x in edges if a == x] or (
                [(alternates[x], True)] if x in alternates else []
            )
            for b, to_x in out:
                if to_x and b not in reached:
                    reached.add(b)
                    todo.append(b)
        expected = {f"q{b}" for a, b, to_x in edges if a in reached and not to_x}
        routed = _routed(topology, f"x{start}")
        assert len(routed) == len(set(routed)) and set(routed) == expected


@pytest.mark.parametrize(
    ("kind", "arguments", "problem"),
    [
        (
            "headers",
            {"x-match": "bogus"},
            'Invalid x-match field value <<"bogus">>; expected all, any, all-with-x, or any-with-x',
        ),
        ("headers", {"x-match": 5}, "Invalid x-match field type signedint (value 5); expected longstr"),
        ("headers", {"x-match": "any-with-x", "a": 1}, None),
        ("headers", {"a": 1}, None),
        ("direct", {"x-match": "bogus"}, None),
    ],
)
def test_binding_problems_are_rabbitmqs(kind, arguments, problem):
    """The texts RabbitMQ 3.10.8 answered to queue.bind."""
    assert binding_problem(kind, arguments) == problem


def test_headers_argument_values_never_crash_routing():
    arguments = {"x-match": 5, "a": {"n": [1, None]}, "b": b"\x00", "c": 1.5}
    topology = _topology(
        [Exchange(vhost=VHOST, name="h", type="headers")], _queues("q"), [_bind("h", "q", **arguments)]
    )
    assert _routed(topology, "h", "", {"a": {"n": [1, None]}, "b": "\x00", "c": 1.5}) == ["q"]
    assert _routed(topology, "h", "", {"a": [], "b": 1}) == []


def test_a_queues_settings_are_read_again_only_when_it_or_the_policies_change():
    topology = _topology(policies=[_policy("ttl", "^q", **{"message-ttl": 1000})])
    cache = SettingsCache()
    queue = Queue(vhost=VHOST, name="q", arguments={"x-max-length": 5})
    first = cache.of(topology, queue)
    assert (first.message_ttl, first.max_length) == (1000, 5)
    assert topology.apply(_change(2, "queue", "put", Queue(vhost=VHOST, name="other")))
    assert cache.of(topology, queue) is first  # another queue declared: nothing to read again
    assert cache.of(topology, Queue(vhost=VHOST, name="q", arguments={"x-max-length": 5})) is first
    recreated = cache.of(topology, Queue(vhost=VHOST, name="q", arguments={"x-max-length": 7}))
    assert recreated.max_length == 7
    assert topology.apply(_change(3, "policy", "put", _policy("ttl", "^q", **{"message-ttl": 50})))
    assert cache.of(topology, queue).message_ttl == 50
    assert topology.apply(_change(4, "policy", "delete", _policy("ttl", "^q")))
    assert cache.of(topology, queue).message_ttl is None
