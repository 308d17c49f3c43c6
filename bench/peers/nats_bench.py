"""NATS JetStream peer benchmark: file-storage stream, publishes with acks, durable pull consumers.

    python bench/peers/nats_bench.py produce|consume|e2e [options]

Produce measures two ways of keeping --inflight publishes awaiting their JetStream ack, and the better
is the result (both figures go to stderr; --produce-way measures one): the library's
js.publish_async, which builds a future and a reply subject per message, and plain publishes sharing
one reply subject whose acks a single subscription counts, as a client keeping up with the server
would do. Pre-load and e2e use the latter.

Consume likewise measures two durable pull consumers over the same pre-loaded stream: nats-py's
fetch(--batch), one request round trip per batch, and a standing pull request that asks for --batch
and tops up by half as messages arrive (what nats.go's Consume does). e2e uses the standing request:
with fetch, messages wait for the next request cycle, which tripled p99 at 2,000 msg/s here.
--ack-every k > 1 makes the consumers AckPolicy.ALL, where one ack covers every message before it.
"""

from __future__ import annotations

import asyncio
import json

import common
import nats
import nats.errors
import nats.js.errors
from nats.js.api import AckPolicy, ConsumerConfig, StatusCode, StorageType, StreamConfig

SYSTEM = "nats"
CLIENT = "nats-py"


async def _connect(url: str) -> nats.NATS:
    async def quiet(_exc: Exception) -> None:  # nats-py logs each failed attempt with a traceback
        pass

    try:
        return await nats.connect(
            url, connect_timeout=3, allow_reconnect=False, max_reconnect_attempts=1, error_cb=quiet
        )
    except (OSError, TimeoutError, nats.errors.Error) as e:
        raise common.unreachable("NATS", url, e) from e


async def _publish_async(js, subject: str, args, phase: common.Phase) -> None:
    """js.publish_async through common.pipeline: one future per message."""
    body = common.filler(args.body_size)

    async def send(_i: int) -> asyncio.Future:
        return await js.publish_async(subject, body)

    def acked() -> None:
        phase.done += 1

    await common.pipeline(send, phase.total, args.inflight, common.Pacer(None), acked)


async def _pipelined(nc, subject: str, args, phase: common.Phase, rate: float | None, stamp: bool) -> None:
    """Plain publishes sharing one reply subject: each gets exactly one reply, so counting them is enough.

    No future per message, which is what js.publish_async spends most of its time on. Counts acks into
    `phase.done` unless `stamp` (e2e, where the phase counts deliveries).
    """
    body = common.filler(args.body_size)
    pacer = common.Pacer(rate)
    acked = 0
    failures: list[bytes] = []
    room = asyncio.Event()

    async def on_ack(msg) -> None:
        nonlocal acked
        if not msg.data or b'"error"' in msg.data:  # no stream answered, or it refused
            failures.append(msg.data or repr(msg.headers).encode())
        acked += 1
        if not stamp:
            phase.done = acked
        room.set()

    async def wait_acks(below: int) -> None:
        while acked < below:
            room.clear()
            await room.wait()

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=on_ack)
    pacer.start()
    for i in range(phase.total):
        await wait_acks(i - args.inflight + 1)
        if failures:
            break
        delay = pacer.delay(i)
        if delay > 0:
            await asyncio.sleep(delay)
        await nc.publish(subject, common.stamped(body) if stamp else body, reply=inbox)
    await wait_acks(phase.total if not failures else 0)
    await sub.unsubscribe()
    if failures:
        raise common.BenchError(f"{len(failures)} publish(es) refused, first: {failures[0]!r}")


async def _add_consumer(js, stream: str, durable: str, args) -> None:
    """A durable consumer reading the whole stream, created before the clock starts."""
    config = ConsumerConfig(
        durable_name=durable,
        ack_policy=AckPolicy.ALL if args.ack_every > 1 else AckPolicy.EXPLICIT,
        max_ack_pending=max(1000, 2 * args.batch),
    )
    await js.add_consumer(stream, config)


def _received(msg, args, phase: common.Phase, latencies: common.Latencies | None) -> bool:
    """Count a delivery; True when it is due for an ack."""
    if latencies is not None:
        latencies.record(msg.data)
    phase.done += 1
    return common.ack_due(phase.done, phase.total, args.ack_every)


async def _consume_fetch(js, stream: str, durable: str, args, phase: common.Phase) -> None:
    """nats-py's fetch until `phase.total` messages arrived.

    A fetch never asks for more than remain: nats-py would hold a short batch until its wait ends.
    """
    sub = await js.pull_subscribe_bind(durable=durable, stream=stream)
    while phase.done < phase.total:
        try:
            msgs = await sub.fetch(min(args.batch, phase.total - phase.done), timeout=1.0)
        except TimeoutError:  # nothing within the wait (nats-py raises both its own and asyncio's)
            continue
        for msg in msgs:
            if _received(msg, args, phase, None):
                await msg.ack()
    await sub.unsubscribe()


async def _consume_standing(nc, js, stream: str, durable: str, args, phase, latencies=None) -> None:
    """A standing pull request: ask for --batch, ask again for half once half of it arrived.

    Requests live as long as the phase may, so none expires mid-run; any status other than a
    heartbeat (the server ending a request early) is an error rather than a silent stall.
    """
    next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
    expires_ns = int(phase.timeout * 1e9)
    inbox = nc.new_inbox()
    asked = 0  # messages requested so far
    done = asyncio.Event()
    failure: list[str] = []

    async def ask(n: int) -> None:
        nonlocal asked
        asked += n
        request = json.dumps({"batch": n, "expires": expires_ns}).encode()
        await nc.publish(next_subject, request, reply=inbox)

    async def delivered(msg) -> None:
        status = msg.headers.get("Status") if msg.headers else None
        if status == StatusCode.CONTROL_MESSAGE:
            return
        if status is not None:
            failure.append(f"{status} {msg.headers.get('Description', '')}")
            return done.set()
        if _received(msg, args, phase, latencies):
            await msg.ack()
        if phase.done >= phase.total:
            return done.set()
        if asked < phase.total and asked - phase.done <= args.batch // 2:
            await ask(min(args.batch - args.batch // 2, phase.total - asked))

    sub = await nc.subscribe(inbox, cb=delivered)
    await ask(min(args.batch, phase.total))
    await done.wait()
    await sub.unsubscribe()
    if failure:
        raise common.BenchError(f"pull request ended by the server: {failure[0]}")


async def _scenario(nc, js, name: str, args, servers: list[int]) -> dict:
    acks = "per-message acks" if args.ack_every == 1 else f"AckPolicy.ALL, one ack per {args.ack_every}"
    pipelined = f"{args.loop}, publish with a shared reply subject, {args.inflight} acks pending"
    standing = f"standing pull request of {args.batch}, {acks}"

    def phase(label: str) -> common.Phase:
        return common.Phase(label, args.count, servers, args.timeout)

    if args.scenario == "produce":
        ways: dict[str, common.Phase] = {}
        if args.produce_way in (None, "publish_async"):
            async with common.measured(phase("produce nats publish_async")) as by_future:
                await _publish_async(js, name, args, by_future)
            await js.purge_stream(name)
            ways[f"{args.loop}, js.publish_async with {args.inflight} acks pending"] = by_future
        if args.produce_way in (None, "pipelined"):
            async with common.measured(phase("produce nats pipelined")) as by_count:
                await _pipelined(nc, name, args, by_count, rate=None, stamp=False)
            ways[pipelined] = by_count
        variant, best = common.best(ways)
        return common.result(SYSTEM, CLIENT, args, best, variant=variant)

    if args.scenario == "consume":
        async with common.measured(phase("pre-load")) as preload:
            await _pipelined(nc, name, args, preload, rate=None, stamp=False)
        # Two durable consumers, each reading the whole stream.
        await _add_consumer(js, name, "fetch", args)
        await _add_consumer(js, name, "standing", args)
        async with common.measured(phase("consume nats fetch")) as fetched:
            await _consume_fetch(js, name, "fetch", args, fetched)
        async with common.measured(phase("consume nats standing request")) as pulled:
            await _consume_standing(nc, js, name, "standing", args, pulled)
        fetch = f"{args.loop}, fetch {args.batch}, {acks}"
        variant, best = common.best({fetch: fetched, f"{args.loop}, {standing}": pulled})
        return common.result(SYSTEM, CLIENT, args, best, variant=variant)

    latencies = common.Latencies()
    await _add_consumer(js, name, "e2e", args)
    async with common.measured(phase("e2e nats")) as e2e:
        consumer = asyncio.ensure_future(_consume_standing(nc, js, name, "e2e", args, e2e, latencies))
        await _pipelined(nc, name, args, e2e, rate=args.rate, stamp=True)
        await consumer
    return common.result(SYSTEM, CLIENT, args, e2e, latencies, f"{pipelined}, {standing}")


async def _run(args, name: str, servers: list[int]) -> dict:
    nc = await _connect(args.url)
    try:
        js = nc.jetstream(publish_async_max_pending=args.inflight)
        try:
            await js.add_stream(StreamConfig(name=name, subjects=[name], storage=StorageType.FILE))
        except nats.js.errors.ServiceUnavailableError as e:
            raise common.BenchError(f"JetStream is not enabled on {args.url}") from e
        try:
            return await _scenario(nc, js, name, args, servers)
        finally:
            await js.delete_stream(name)
    finally:
        await nc.close()


def main() -> None:
    args = common.parse_args(
        "NATS JetStream", (CLIENT,), "nats://127.0.0.1:4222", produce_ways=("publish_async", "pipelined")
    )
    name = common.resource_name(SYSTEM, args.scenario)
    servers = common.find_pids("nats-server")
    common.emit(common.run_async(_run(args, name, servers), args.loop))


if __name__ == "__main__":
    common.run_main(main)
