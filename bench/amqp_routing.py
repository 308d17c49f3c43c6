"""What the AMQP gateway pays per published message before it stores it: routing through a vhost's
topology (ferrymq.amqp.topology) and mapping the AMQP properties to RocketMQ's (protocol.amqp.mapping).
CPU time per call, the median of several rounds (targets: ~1 us to route to one queue via a direct
exchange, a few us to map the properties).

    .venv/bin/python bench/amqp_routing.py --rounds 5 --save bench/results/amqp-routing.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from pamqp import commands

from ferrymq.amqp.topology import Topology
from ferrymq.bench.machine import machine_info
from ferrymq.meta.entities import Binding, Exchange, Queue, Snapshot, Vhost
from ferrymq.meta.store import DEFAULT_EXCHANGES
from ferrymq.protocol.amqp.mapping import from_rocketmq, to_rocketmq
from ferrymq.protocol.properties import decode_properties

V = "/"


def topology() -> Topology:
    """direct "d" (1000 queues, one key each), fanout "f" (10 queues), topic "t" (1000 bindings
    "s{i}.*.#"), headers "h" (100 bindings), and "e1" -> "e2" -> "e3" -> queue q0 (fanouts)."""
    exchanges = [Exchange(vhost=V, name=n, type=t, internal=i) for n, t, i in DEFAULT_EXCHANGES]
    exchanges += [
        Exchange(vhost=V, name=n, type=t) for n, t in [("d", "direct"), ("f", "fanout"), ("t", "topic")]
    ]
    exchanges += [Exchange(vhost=V, name="h", type="headers")]
    exchanges += [Exchange(vhost=V, name=f"e{i}", type="fanout") for i in (1, 2, 3)]
    queues = [Queue(vhost=V, name=f"q{i}") for i in range(1000)]
    bindings = [Binding(vhost=V, source="d", destination=f"q{i}", routing_key=f"k{i}") for i in range(1000)]
    bindings += [Binding(vhost=V, source="f", destination=f"q{i}") for i in range(10)]
    bindings += [
        Binding(vhost=V, source="t", destination=f"q{i}", routing_key=f"s{i}.*.#") for i in range(1000)
    ]
    bindings += [
        Binding(vhost=V, source="h", destination=f"q{i}", arguments={"x-match": "all", "n": i})
        for i in range(100)
    ]
    bindings += [
        Binding(vhost=V, source="e1", destination="e2", destination_type="exchange"),
        Binding(vhost=V, source="e2", destination="e3", destination_type="exchange"),
        Binding(vhost=V, source="e3", destination="q0"),
    ]
    snapshot = Snapshot(
        vhost=Vhost(name=V), version=1, exchanges=exchanges, queues=queues, bindings=bindings, policies=[],
        permissions=[],
    )  # fmt: skip
    return Topology.from_snapshot(snapshot)


def cpu_us_per_call(fn: Callable[[int], object], calls: int) -> float:
    start = time.process_time()
    for i in range(calls):
        fn(i)
    return (time.process_time() - start) / calls * 1e6


def scenarios() -> dict[str, tuple[Callable[[int], object], int]]:
    top = topology()
    top.route("t", "s5.x.y")
    plain = commands.Basic.Properties(content_type="application/json", delivery_mode=2).marshal()
    with_headers = commands.Basic.Properties(
        content_type="application/json",
        delivery_mode=2,
        message_id="order-17",
        headers={"traceId": "t-1", "retries": 3, "urgent": True, "tenant": "acme"},
    ).marshal()
    amqp_stored = decode_properties(to_rocketmq("orders", "order.created", with_headers))
    rocketmq_stored = {
        "TAGS": "created",
        "UNIQ_KEY": "7F0000010000",
        "KEYS": "k1",
        "color": "red",
        "traceId": "t",
    }
    return {
        "route_direct_one_queue": (lambda i: top.route("d", "k7"), 200_000),
        "route_direct_uncached": (lambda i: top.route("d", f"k{i % 1000}x{i}"), 50_000),
        "route_fanout_10_queues": (lambda i: top.route("f", ""), 200_000),
        "route_topic_1000_bindings": (lambda i: top.route("t", "s5.x.y"), 200_000),
        "route_topic_1000_bindings_uncached": (lambda i: top.route("t", f"s{i % 1000}.x.{i}"), 20_000),
        "route_headers_100_bindings": (lambda i: top.route("h", "", {"n": i % 100}), 20_000),
        "route_exchange_chain_3": (lambda i: top.route("e1", ""), 200_000),
        "to_rocketmq_no_headers": (lambda i: to_rocketmq("orders", "order.created", plain), 100_000),
        "to_rocketmq_4_headers": (lambda i: to_rocketmq("orders", "order.created", with_headers), 50_000),
        "from_rocketmq_amqp_origin": (lambda i: from_rocketmq(amqp_stored), 50_000),
        "from_rocketmq_rocketmq_origin": (
            lambda i: from_rocketmq(rocketmq_stored, 1_700_000_000_000),
            50_000,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--save", help="write the results as JSON here")
    args = parser.parse_args()
    runs: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name, (fn, calls) in scenarios().items():  # fresh caches each round: the first call warms them
            fn(0)
            runs.setdefault(name, []).append(round(cpu_us_per_call(fn, calls), 3))
    report = {
        "suite": "amqp-routing",
        "command": f".venv/bin/python bench/amqp_routing.py --rounds {args.rounds}"
        + (f" --save {args.save}" if args.save else ""),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "median_cpu_us_per_call": {name: statistics.median(r) for name, r in runs.items()},
        "runs_cpu_us_per_call": runs,
    }
    if args.save:
        Path(args.save).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["median_cpu_us_per_call"], indent=1))


if __name__ == "__main__":
    main()
