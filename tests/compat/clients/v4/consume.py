"""Receive messages with the rocketmq 0.4.4 PushConsumer (C++ 4.x client) and report each one.

Stops by itself once --count distinct messages arrived, after --timeout seconds, or on SIGTERM/SIGINT,
always with a clean shutdown (which commits the consumed offsets). Output, one JSON line each:
``{"event": "started"}``, then per delivery ``{"event": "message", "body", "keys", "tags", "properties",
"topic", "queue_id", "queue_offset", "msg_id", "reconsume_times"}``, then ``{"event": "summary",
"received", "distinct", "reason"}``. Exit code 4 when --count was not reached in time.
"""

from __future__ import annotations

import signal
import threading
import time

from common import (
    base_parser,
    check_namesrv,
    emit,
    fail,
    finish,
    import_client,
    start_watchdog,
    text,
    use_credentials,
)

client, _ = import_client()

SHUTDOWN_BOUND = 30.0  # seconds a clean shutdown may take before the watchdog ends the process


class Receiver:
    """The message callback: reports every delivery and notices when --count distinct ones arrived."""

    def __init__(self, count: int | None, property_names: list[str]) -> None:
        self.count = count
        self.property_names = property_names
        self.received = 0
        self.seen: set[str] = set()
        self.errors = 0
        self.enough = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, message) -> None:
        # Never raise: the wrapper re-raises from inside the ctypes callback, so the C++ client gets an
        # undefined status instead of RECONSUME_LATER. Every delivery is acknowledged (CONSUME_SUCCESS).
        try:
            record = self.describe(message)
        except Exception as exc:
            with self._lock:
                self.errors += 1
            emit("error", error=f"{type(exc).__name__}: {exc}")
            return
        with self._lock:
            self.received += 1
            self.seen.add(record["msg_id"] or record["body"])
            emit("message", **record)  # under the lock: no line is printed after the summary is decided
            if self.count is not None and len(self.seen) >= self.count:
                self.enough.set()

    def describe(self, message) -> dict:
        return {
            "body": text(message.body),
            "keys": text(message.keys),
            "tags": text(message.tags),
            "properties": {name: text(message.get_property(name)) for name in self.property_names},
            "topic": message.topic,
            "queue_id": message.queue_id,
            "queue_offset": message.queue_offset,
            "msg_id": message.id,
            "reconsume_times": message.reconsume_times,
            "born_timestamp": message.born_timestamp,
            "store_timestamp": message.store_timestamp,
        }


def main() -> None:
    args = parse_args()
    start_watchdog(args.timeout + SHUTDOWN_BOUND, "consuming")
    check_namesrv(args.namesrv)
    stop_requested = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop_requested.set())

    model = (
        client.MessageModel.BROADCASTING if args.model == "broadcasting" else client.MessageModel.CLUSTERING
    )
    consumer = client.PushConsumer(args.group, orderly=args.orderly, message_model=model)
    consumer.set_namesrv_addr(args.namesrv)
    use_credentials(consumer, args)
    if args.threads:
        consumer.set_thread_count(args.threads)
    receiver = Receiver(args.count, args.property)
    if args.fail_times:
        subscribe_failing(consumer, args, receiver)
    else:
        consumer.subscribe(args.topic, receiver, args.expression)
    consumer.start()
    emit("started", group=args.group, topic=args.topic, expression=args.expression, model=args.model)

    reason = wait_for_stop(receiver.enough, stop_requested, time.monotonic() + args.timeout)
    consumer.shutdown()  # waits for running callbacks, then commits offsets (clustering: to the broker)
    distinct = len(receiver.seen)
    emit("summary", received=receiver.received, distinct=distinct, reason=reason, errors=receiver.errors)
    if receiver.errors:
        fail(f"{receiver.errors} message(s) could not be read; see the error lines")
    if args.count is not None and distinct < args.count:
        fail(f"received {distinct} of {args.count} messages within {args.timeout:.0f}s", code=4)
    finish(0)


def parse_args():
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--group", required=True, help="consumer group")
    parser.add_argument("--expression", default="*", help="tag expression, e.g. 'TagA || TagB'")
    parser.add_argument("--model", choices=("clustering", "broadcasting"), default="clustering")
    parser.add_argument("--orderly", action="store_true", help="consume each queue in order (locks it)")
    parser.add_argument("--count", type=int, help="stop after this many distinct messages")
    parser.add_argument(
        "--fail-times",
        type=int,
        default=0,
        help="answer RECONSUME_LATER to each message's first N deliveries",
    )
    parser.add_argument("--threads", type=int, help="consume threads (the client's default: one per CPU)")
    parser.add_argument(
        "--property", action="append", default=[], metavar="NAME", help="user property to report (repeatable)"
    )
    args = parser.parse_args()
    if args.count is not None and args.count < 1:
        parser.error("--count must be at least 1")
    return args


def subscribe_failing(consumer, args, receiver: Receiver) -> None:
    """Subscribe with a callback that reports each delivery and returns RECONSUME_LATER (1) to the first
    --fail-times deliveries of each message. The wrapper's own subscribe() cannot: an exception in its
    callback escapes ctypes, which then answers 0 (CONSUME_SUCCESS)."""
    attempts: dict[str, int] = {}
    lock = threading.Lock()

    def on_message(_consumer, handle) -> int:
        message = client.RecvMessage(handle)
        receiver(message)
        with lock:
            attempts[message.id] = attempts.get(message.id, 0) + 1
            return 1 if attempts[message.id] <= args.fail_times else 0

    client.ffi_check(client.dll.Subscribe(consumer._handle, args.topic.encode(), args.expression.encode()))
    consumer._register_callback(on_message)


def wait_for_stop(enough: threading.Event, stop_requested: threading.Event, deadline: float) -> str:
    """Why consumption ends: "count", "signal" or "timeout".

    Waits in short slices so that a signal (handled on this thread) is noticed promptly.
    """
    while True:
        if enough.is_set():
            return "count"
        if stop_requested.is_set():
            return "signal"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout"
        enough.wait(min(remaining, 0.1))


if __name__ == "__main__":
    main()
