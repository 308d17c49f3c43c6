"""RabbitMQ peer benchmark: durable queue, persistent messages, publisher confirms, consumer acks.

    python bench/peers/rabbitmq_bench.py produce|consume|e2e [--client pika|aio-pika] [options]

pika's BlockingConnection waits for each confirm before the next publish, so for produce with pika
both that simple form and a pipelined one (the callback API, SelectConnection, with --inflight
confirms outstanding) are measured, and the better is the result; both figures go to stderr
(--produce-way measures one). The blocking form runs on at most 10,000 messages, as it is slow.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable

import aio_pika
import aio_pika.exceptions
import common
import pika
import pika.exceptions

SYSTEM = "rabbitmq"
CLIENTS = ("pika", "aio-pika")
BLOCKING_SAMPLE = 10_000  # messages for pika's one-confirm-at-a-time produce
PERSISTENT = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)


# pika


def _params(url: str) -> pika.URLParameters:
    params = pika.URLParameters(url)
    params.connection_attempts = 1
    params.socket_timeout = 5
    return params


def _blocking(url: str) -> pika.BlockingConnection:
    try:
        return pika.BlockingConnection(_params(url))
    except pika.exceptions.AMQPConnectionError as e:
        raise common.unreachable("RabbitMQ", url, e) from e


def _pika_ack(channel, tag: int, received: int, total: int, every: int) -> None:
    """Per-message ack, or one cumulative (multiple=True) ack per `every` messages."""
    if common.ack_due(received, total, every):
        channel.basic_ack(tag, multiple=every > 1)


class PikaPipelined:
    """pika's callback API: up to --inflight publishes await their confirm at once.

    With `latencies`, a consumer on a second channel of the same connection receives what is sent
    (e2e); the phase then counts deliveries, otherwise confirms.
    """

    def __init__(self, args, queue: str, phase: common.Phase, rate: float | None, latencies=None) -> None:
        self.args, self.queue, self.phase, self.latencies = args, queue, phase, latencies
        self.pacer = common.Pacer(rate)
        self.body = common.filler(args.body_size)
        self.unconfirmed: collections.deque[int] = collections.deque()  # delivery tags, ascending
        self.sent = self.received = self.channels_ready = 0
        self.timer = None
        self.error: Exception | None = None
        self.stopping = False

    def run(self) -> None:
        self.conn = pika.SelectConnection(
            _params(self.args.url),
            on_open_callback=self._opened,
            on_open_error_callback=self._open_failed,
            on_close_callback=self._closed,
        )
        self.conn.ioloop.start()
        self.phase.finish()
        if self.error:
            raise self.error
        self.phase.check_complete()

    def _opened(self, conn) -> None:
        conn.channel(on_open_callback=self._publisher_open)
        if self.latencies is not None:
            conn.channel(on_open_callback=self._consumer_open)

    def _publisher_open(self, channel) -> None:
        self.publisher = channel
        channel.add_on_close_callback(self._channel_closed)
        channel.confirm_delivery(self._confirmed, callback=lambda _: self._ready())

    def _consumer_open(self, channel) -> None:
        channel.add_on_close_callback(self._channel_closed)

        def consume(_frame) -> None:
            channel.basic_consume(self.queue, self._delivered, callback=lambda _: self._ready())

        channel.basic_qos(prefetch_count=self.args.batch, callback=consume)

    def _ready(self) -> None:
        self.channels_ready += 1
        if self.channels_ready == (1 if self.latencies is None else 2):
            self.conn.ioloop.call_later(self.args.timeout, self._stop)
            self.phase.start()
            self.pacer.start()
            self._pump()

    def _pump(self) -> None:
        self.timer = None
        if self.stopping:
            return
        while self.sent < self.phase.total and len(self.unconfirmed) < self.args.inflight:
            delay = self.pacer.delay(self.sent)
            if delay > 0:
                self.timer = self.conn.ioloop.call_later(delay, self._pump)
                return
            body = self.body if self.latencies is None else common.stamped(self.body)
            self.publisher.basic_publish("", self.queue, body, PERSISTENT)
            self.sent += 1
            self.unconfirmed.append(self.sent)  # delivery tags count from 1 on a confirm channel

    def _confirmed(self, frame) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            self.error = common.BenchError(f"publish {method.delivery_tag} was nacked")
            return self._stop()
        if method.multiple:
            while self.unconfirmed and self.unconfirmed[0] <= method.delivery_tag:
                self.unconfirmed.popleft()
        else:
            self.unconfirmed.remove(method.delivery_tag)  # at the front but for reordering
        if self.latencies is None:
            self.phase.done = self.sent - len(self.unconfirmed)
            if self.phase.done == self.phase.total:
                return self._stop()
        if self.timer is None:
            self._pump()

    def _delivered(self, channel, method, _properties, body: bytes) -> None:
        self.latencies.record(body)
        self.received += 1
        self.phase.done = self.received
        _pika_ack(channel, method.delivery_tag, self.received, self.phase.total, self.args.ack_every)
        if self.received == self.phase.total:
            self._stop()

    def _stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            self.phase.finish()
            self.conn.close()

    def _open_failed(self, _conn, exc) -> None:
        self.error = common.unreachable("RabbitMQ", self.args.url, exc)
        self.conn.ioloop.stop()

    def _channel_closed(self, _channel, reason) -> None:
        if not self.stopping:
            self.error = common.BenchError(f"channel closed by the server: {reason}")
            self._stop()

    def _closed(self, _conn, reason) -> None:
        if not self.stopping:
            self.error = common.BenchError(f"connection lost: {reason}")
        self.conn.ioloop.stop()


def _pika_blocking_produce(args, queue: str, phase: common.Phase) -> None:
    """The simple form: basic_publish on a confirm channel returns once the broker confirmed."""
    conn = _blocking(args.url)
    channel = conn.channel()
    channel.confirm_delivery()
    body = common.filler(args.body_size)
    with phase:
        while phase.done < phase.total and not phase.expired():
            channel.basic_publish("", queue, body, PERSISTENT)
            phase.done += 1
    conn.close()


def _pika_consume(args, queue: str, phase: common.Phase) -> None:
    """basic_consume with prefetch, driven by process_data_events as a blocking pika client does."""
    conn = _blocking(args.url)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=args.batch)

    def delivered(ch, method, _properties, _body) -> None:
        phase.done += 1
        _pika_ack(ch, method.delivery_tag, phase.done, phase.total, args.ack_every)

    with phase:
        channel.basic_consume(queue, delivered)
        while phase.done < phase.total and not phase.expired():
            conn.process_data_events(time_limit=0.5)
    conn.close()


def _pika(args, queue: str, servers: list[int]) -> dict:
    # Short-lived connections for set-up and clean-up: an idle BlockingConnection misses heartbeats.
    with _blocking(args.url) as conn:
        conn.channel().queue_declare(queue, durable=True)
    try:
        return _pika_scenario(args, queue, servers)
    finally:
        with _blocking(args.url) as conn:
            conn.channel().queue_delete(queue)


def _pika_scenario(args, queue: str, servers: list[int]) -> dict:
    pipelined = f"SelectConnection, {args.inflight} confirms in flight"
    if args.scenario == "produce":
        ways: dict[str, common.Phase] = {}
        if args.produce_way in (None, "blocking"):
            # One confirm at a time runs at about 1,000 msg/s here: a sample of it is enough.
            sample = min(args.count, BLOCKING_SAMPLE)
            blocking = common.Phase("produce pika blocking", sample, servers, args.timeout)
            _pika_blocking_produce(args, queue, blocking)
            ways["BlockingConnection, one confirm at a time"] = blocking
            with _blocking(args.url) as conn:
                conn.channel().queue_purge(queue)
        if args.produce_way in (None, "pipelined"):
            phase = common.Phase("produce pika pipelined", args.count, servers, args.timeout)
            PikaPipelined(args, queue, phase, rate=None).run()
            ways[pipelined] = phase
        variant, phase = common.best(ways)
        return common.result(SYSTEM, "pika", args, phase, variant=variant)
    if args.scenario == "consume":
        PikaPipelined(
            args, queue, common.Phase("pre-load", args.count, servers, args.timeout), rate=None
        ).run()
        phase = common.Phase("consume pika", args.count, servers, args.timeout)
        _pika_consume(args, queue, phase)
        return common.result(SYSTEM, "pika", args, phase, variant=f"BlockingConnection, {_acks(args)}")
    latencies = common.Latencies()
    phase = common.Phase("e2e pika", args.count, servers, args.timeout)
    PikaPipelined(args, queue, phase, rate=args.rate, latencies=latencies).run()
    return common.result(SYSTEM, "pika", args, phase, latencies, f"{pipelined}, {_acks(args)}")


def _acks(args) -> str:
    every = "per-message acks" if args.ack_every == 1 else f"multiple ack per {args.ack_every}"
    return f"prefetch {args.batch}, {every}"


# aio-pika


@contextlib.asynccontextmanager
async def _aio_consuming(conn, queue: str, args, phase: common.Phase, latencies=None):
    """A consumer on its own channel, yielding an event set once `phase.total` messages arrived.

    Leaving closes the channel, so the consumer is gone before the queue is deleted.
    """
    async with conn.channel() as channel:
        await channel.set_qos(prefetch_count=args.batch)
        done = asyncio.Event()

        async def delivered(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            if latencies is not None:
                latencies.record(message.body)
            phase.done += 1
            if common.ack_due(phase.done, phase.total, args.ack_every):
                await message.ack(multiple=args.ack_every > 1)
            if phase.done >= phase.total:
                done.set()

        await (await channel.get_queue(queue)).consume(delivered)
        yield done


def _aio_sender(channel, queue: str, args, stamp: bool) -> Callable:
    """send(i) for common.pipeline: one task per publish, done when the broker confirmed it."""
    body = common.filler(args.body_size)
    exchange = channel.default_exchange
    persistent = aio_pika.DeliveryMode.PERSISTENT

    async def send(_i: int) -> asyncio.Future:
        message = aio_pika.Message(common.stamped(body) if stamp else body, delivery_mode=persistent)
        return asyncio.ensure_future(exchange.publish(message, routing_key=queue))

    return send


async def _aio(args, queue: str, servers: list[int]) -> dict:
    try:
        conn = await aio_pika.connect(args.url, timeout=5)
    except (TimeoutError, OSError, aio_pika.exceptions.AMQPConnectionError) as e:
        raise common.unreachable("RabbitMQ", args.url, e) from e
    async with conn:
        channel = await conn.channel(publisher_confirms=True)
        declared = await channel.declare_queue(queue, durable=True)
        try:
            return await _aio_scenario(conn, channel, queue, args, servers)
        finally:
            await declared.delete(if_unused=False, if_empty=False)


async def _aio_scenario(conn, channel, queue: str, args, servers: list[int]) -> dict:
    window = f"{args.loop}, sliding window of {args.inflight} confirms"
    send = _aio_sender(channel, queue, args, stamp=args.scenario == "e2e")

    def phase(label: str) -> common.Phase:
        return common.Phase(label, args.count, servers, args.timeout)

    if args.scenario == "e2e":
        latencies = common.Latencies()
        e2e = phase("e2e aio-pika")
        async with _aio_consuming(conn, queue, args, e2e, latencies) as done, common.measured(e2e):
            await common.pipeline(send, args.count, args.inflight, common.Pacer(args.rate), lambda: None)
            await done.wait()
        return common.result(SYSTEM, "aio-pika", args, e2e, latencies, f"{window}, {_acks(args)}")

    label = "produce aio-pika" if args.scenario == "produce" else "pre-load"
    async with common.measured(phase(label)) as sent:

        def acked() -> None:
            sent.done += 1

        await common.pipeline(send, args.count, args.inflight, common.Pacer(None), acked)
    if args.scenario == "produce":
        return common.result(SYSTEM, "aio-pika", args, sent, variant=window)
    async with (
        common.measured(phase("consume aio-pika")) as consume,
        _aio_consuming(conn, queue, args, consume) as done,
    ):
        await done.wait()
    return common.result(SYSTEM, "aio-pika", args, consume, variant=f"{args.loop}, {_acks(args)}")


def main() -> None:
    args = common.parse_args(
        "RabbitMQ", CLIENTS, "amqp://guest:guest@127.0.0.1:5672/%2F", produce_ways=("blocking", "pipelined")
    )
    queue = common.resource_name(SYSTEM, args.scenario)
    servers = args.server_pid or common.find_pids("beam.smp", "rabbit")
    if args.client == "pika":
        line = _pika(args, queue, servers)
    else:
        line = common.run_async(_aio(args, queue, servers), args.loop)
    common.emit(line)


if __name__ == "__main__":
    common.run_main(main)
