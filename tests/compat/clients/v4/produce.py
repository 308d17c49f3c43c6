"""Send numbered messages with the rocketmq 0.4.4 Producer (C++ 4.x client) and report each send.

Message i has body ``<prefix>-<i>``, after --pad dots (the client compresses bodies of 4 KiB and
more); with --keys its key is ``<prefix>-key-<i>``; its tag is the (i mod n)-th --tag; every
--property is set on every message. In orderly mode message i is sent with sharding key
``i mod --shards`` through the wrapper's hash selector (queue = key mod queue count).

Output, one JSON line each: ``{"event": "sent", "i", "body", "keys", "tags", "shard", "msg_id",
"status", "queue", "offset"}`` then ``{"event": "summary", "sent"}``. ``queue`` is known only in
orderly mode (SendResult has no queue id); oneway sends have no result at all.
"""

from __future__ import annotations

import time

from common import (
    base_parser,
    check_namesrv,
    emit,
    fail,
    finish,
    import_client,
    start_watchdog,
    use_credentials,
)

client, errors = import_client()

NO_ROUTE = "No route info"  # what the C++ producer raises while the topic has no route (and nothing was sent)


def main() -> None:
    args = parse_args()
    start_watchdog(args.timeout + 15, "producing")
    check_namesrv(args.namesrv)
    producer = client.Producer(args.group, timeout=args.send_timeout)
    producer.set_namesrv_addr(args.namesrv)
    use_credentials(producer, args)
    producer.start()
    deadline = time.monotonic() + args.timeout
    for i in range(args.count):
        message = build_message(args, i)
        # The first send also waits for the route: a broker that just started may not be registered yet.
        route_deadline = time.monotonic() + args.route_timeout if i == 0 else 0.0
        result = send_with_route_retry(producer, message, args, i, route_deadline)
        emit("sent", **describe(args, i), **result)
        if time.monotonic() > deadline:
            fail(f"sent only {i + 1} of {args.count} messages within {args.timeout:.0f}s")
    producer.shutdown()
    emit("summary", sent=args.count)
    finish(0)


def parse_args():
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("sync", "oneway", "orderly"), default="sync")
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--prefix", default="m", help="body of message i is <prefix>-<i>")
    parser.add_argument("--group", default="compat_producer", help="producer group")
    parser.add_argument(
        "--resend-busy",
        action="store_true",
        help="send again (after 50 ms) a message whose send failed once the topic had a route: what the "
        "C++ client raises after the broker refused it with flow control three times; a 'busy' line each",
    )
    parser.add_argument("--pad", type=int, default=0, help="dots before each body (to make it large)")
    parser.add_argument("--keys", action="store_true", help="give message i the key <prefix>-key-<i>")
    parser.add_argument("--tag", action="append", default=[], help="tags, given to the messages in turn")
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="user property for every message",
    )
    parser.add_argument("--shards", type=int, default=4, help="orderly mode: number of sharding keys")
    parser.add_argument("--delay-level", type=int, default=0, help="delay level of every message (0: none)")
    parser.add_argument("--send-timeout", type=int, default=3000, help="per-send timeout in ms")
    parser.add_argument(
        "--route-timeout",
        type=float,
        default=30.0,
        help="seconds the first send retries while there is no route",
    )
    args = parser.parse_args()
    if args.count < 1 or args.shards < 1:
        parser.error("--count and --shards must be at least 1")
    if any("=" not in item for item in args.property):
        parser.error("--property takes NAME=VALUE")
    args.properties = dict(item.split("=", 1) for item in args.property)
    return args


def describe(args, i: int) -> dict:
    """What message i carries; shared by build_message and the output line."""
    return {
        "i": i,
        "body": "." * args.pad + f"{args.prefix}-{i}",
        "keys": f"{args.prefix}-key-{i}" if args.keys else None,
        "tags": args.tag[i % len(args.tag)] if args.tag else None,
        "shard": i % args.shards if args.mode == "orderly" else None,
    }


def build_message(args, i: int):
    fields = describe(args, i)
    message = client.Message(args.topic)
    message.set_body(fields["body"])
    if fields["keys"]:
        message.set_keys(fields["keys"])
    if fields["tags"]:
        message.set_tags(fields["tags"])
    for name, value in args.properties.items():
        message.set_property(name, value)
    if args.delay_level:
        message.set_delay_time_level(args.delay_level)
    return message


def send_with_route_retry(producer, message, args, i: int, route_deadline: float) -> dict:
    """Send once; while the topic has no route and before `route_deadline`, try again."""
    while True:
        try:
            return send(producer, message, args, i)
        except errors.RocketMQException as exc:
            if args.resend_busy and i > 0:  # it reports the last of its three tries as "No route info"
                emit("busy", i=i, error=str(exc)[:300])
                time.sleep(0.05)
                continue
            if NO_ROUTE in str(exc) and time.monotonic() < route_deadline:
                time.sleep(0.2)  # the NameServer learns the broker's topics from its registration
                continue
            waited = f" (retried for {args.route_timeout:.0f}s)" if NO_ROUTE in str(exc) and i == 0 else ""
            fail(f"{args.mode} send of message {i} to topic {args.topic!r} failed{waited}: {exc}")


def send(producer, message, args, i: int) -> dict:
    if args.mode == "oneway":
        producer.send_oneway(message)
        return {"status": "SENT_ONEWAY", "msg_id": None, "queue": None, "offset": None}
    if args.mode == "orderly":
        chosen = []

        def select(queue_count, msg, arg):
            chosen.append(client.hashing_queue_selector(queue_count, msg, arg))
            return chosen[-1]

        result = producer.send_orderly(message, i % args.shards, queue_selector=select)
        queue = chosen[-1] if chosen else None
    else:
        result = producer.send_sync(message)
        queue = None
    return {"status": result.status.name, "msg_id": result.msg_id, "queue": queue, "offset": result.offset}


if __name__ == "__main__":
    main()
