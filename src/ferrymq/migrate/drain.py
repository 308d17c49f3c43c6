"""Moving one queue's backlog from RabbitMQ into the gateway, at least once.

RabbitMQ delivers with manual acks inside a prefetch window; each message is published unchanged
(its properties byte for byte) to the gateway's default exchange under the queue's name, mandatory and
with publisher confirms, and acknowledged upstream only once the gateway confirmed it, in order, with
one multiple ack per read. A nacked publish is handed back to RabbitMQ (requeued); a returned one
(the queue is missing in the gateway) stops the queue, and what is unacknowledged goes back to
RabbitMQ when its channel closes. So nothing is lost; a message is copied twice only when the
migrator dies between the gateway's confirm and RabbitMQ's ack (redelivered, and counted so)."""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pamqp import commands

from ferrymq.migrate.wire import Channel, Connection, WireError
from ferrymq.protocol.amqp import fast
from ferrymq.protocol.amqp.methods import encode_method

POLL_S = 0.25  # how often RabbitMQ's queue count is read
CLOSE_TIMEOUT_S = 30.0  # how long in-flight publishes may take to settle when stopping


@dataclass
class QueueProgress:
    """What the display shows of one queue."""

    name: str
    state: str = "waiting"  # waiting, draining, drained, stopped, failed
    drained: int = 0  # confirmed by the gateway and acknowledged upstream
    remaining: int | None = None  # ready in RabbitMQ plus in flight
    redelivered: int = 0  # came with redelivered=true: maybe copied already by an earlier run
    nacked: int = 0  # refused by the gateway and handed back to RabbitMQ
    direct: bool = False  # stored straight into the brokers, not published through the gateway
    error: str = ""
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None

    @property
    def done(self) -> bool:
        return self.state in ("drained", "stopped", "failed")

    def rate(self) -> float:
        elapsed = (self.finished or time.monotonic()) - self.started
        return self.drained / elapsed if elapsed > 0 else 0.0


class ConfirmWindow:
    """Upstream delivery tags in the order they were published to the gateway, settled by its confirms
    (sequence numbers from 1; an ack or nack covers one sequence or, multiple, every one up to it).
    What settles comes out in publish order, so upstream acks can be multiple."""

    def __init__(self) -> None:
        self._pending: collections.deque[int] = collections.deque()
        self._head = 1  # the confirm sequence of _pending[0]
        self._early: dict[int, bool] = {}  # single confirms for a sequence past the head

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, tag: int) -> None:
        self._pending.append(tag)

    def settle(self, seq: int, multiple: bool, ok: bool) -> list[tuple[int, bool]]:
        """(upstream tag, stored) of every publish settled now, in publish order."""
        pending, early, settled = self._pending, self._early, []
        if not multiple and seq != self._head:
            early[seq] = ok
            seq = self._head - 1  # only what is now contiguous at the head
        while pending and (self._head <= seq or self._head in early):
            settled.append((pending.popleft(), early.pop(self._head, ok)))
            self._head += 1
        return settled


@dataclass(frozen=True)
class DrainOptions:
    prefetch: int = 2000
    lanes: int = 1  # gateway channels per queue: more store in parallel, but keep order only per read
    settle_s: float = 2.0  # RabbitMQ's count must stay 0 this long
    follow: bool = False  # keep draining until stopped


@dataclass
class _Lane:
    """One confirming channel on the gateway: what it was given and not yet confirmed."""

    channel: Channel
    publish: bytes  # the basic.publish method frame, the same for every message of the queue
    window: ConfirmWindow = field(default_factory=ConfirmWindow)
    out: list[bytes] = field(default_factory=list)  # publishes to write after this read


class QueueDrain:
    """One queue: a consuming channel and a control channel on RabbitMQ, and one or more confirming
    channels (lanes) on the gateway. The gateway stores one channel's publishes one batch after the
    other, so with several lanes it stores batches side by side; each read's messages go to one lane
    (the next read to the next), so RabbitMQ's order holds within a read, and across reads only with
    a single lane. Upstream acks stay in delivery order whatever lane confirms first."""

    _tags = itertools.count(1)

    def __init__(
        self, name: str, source: Connection, sink: Connection, options: DrainOptions, stop: asyncio.Event
    ) -> None:
        self.name = name
        self.progress = QueueProgress(name)
        self._source, self._sink = source, sink
        self._options, self._stop = options, stop
        self._lanes: list[_Lane] = []
        self._turn = 0  # the lane this read's messages go to
        self._order: collections.deque[int] = collections.deque()  # upstream tags not yet settled
        self._verdict: dict[int, bool] = {}  # settled by a lane, waiting for earlier tags
        self._upstream: list[bytes] = []  # nacks for RabbitMQ, in order with the acks
        self._ack_to = 0  # the last upstream tag to acknowledge (multiple)
        self._failed = ""
        self._consuming: Channel | None = None
        self._consumer_tag = f"ferrymq-migrate-{next(self._tags)}"
        self._hooks: list[tuple[Connection, Callable[[], None]]] = []

    async def run(self) -> QueueProgress:
        progress = self.progress
        try:
            await self._run()
        except WireError as e:
            self._failed = self._failed or str(e)
        except Exception as e:  # keep the other queues going; this one reports why it stopped
            self._failed = self._failed or f"{type(e).__name__}: {e}"
        finally:
            self._detach()
        if self._failed:
            progress.state, progress.error = "failed", self._failed
        progress.finished = time.monotonic()
        return progress

    async def _run(self) -> None:
        source, options, progress = self._source, self._options, self.progress
        await self._open_sink()
        control = await source.channel()
        consuming = self._consuming = await source.channel()
        await consuming.call(commands.Basic.Qos(prefetch_count=options.prefetch))
        consuming.on_deliver = self._deliver
        consuming.on_cancel = lambda: self._fail(f"RabbitMQ cancelled the consumer of '{self.name}'")
        self._attach(source, self._flush_publishes)
        progress.state, progress.started = "draining", time.monotonic()
        await consuming.call(commands.Basic.Consume(queue=self.name, consumer_tag=self._consumer_tag))
        await self._watch(control)
        if not self._failed:
            await consuming.call(commands.Basic.Cancel(consumer_tag=self._consumer_tag))
            await self._settle()
        progress.remaining = await self._count(control)
        if progress.state == "draining":
            progress.state = "stopped"
        # closing hands RabbitMQ back what it delivered and was not confirmed (after a failure)
        for channel in (consuming, control, *self._sink_channels()):
            await channel.close()

    async def _open_sink(self) -> None:
        """The gateway's confirming channels (lanes), once the queue is found there."""
        sink = self._sink
        checking = await sink.channel()
        try:
            await checking.call(commands.Queue.Declare(queue=self.name, passive=True))
        except WireError as e:
            missing = f"queue '{self.name}' is not in the gateway ({e}); import the definitions first"
            raise WireError(missing) from None
        await checking.close()
        publish = commands.Basic.Publish(exchange="", routing_key=self.name, mandatory=True)
        for _ in range(max(1, self._options.lanes)):
            channel = await sink.channel()
            await channel.call(commands.Confirm.Select())
            lane = _Lane(channel, encode_method(channel.number, publish))
            channel.on_confirm = functools.partial(self._confirm, lane)
            channel.on_return = self._returned
            self._lanes.append(lane)
        self._attach(sink, self._flush_acks)

    def _sink_channels(self) -> list[Channel]:
        return [lane.channel for lane in self._lanes]

    async def _count(self, control: Channel) -> int:
        ok = await control.call(commands.Queue.Declare(queue=self.name, passive=True))
        assert isinstance(ok, commands.Queue.DeclareOk)
        return (ok.message_count or 0) + len(self._order)

    async def _watch(self, control: Channel) -> None:
        """Until the queue stays empty for the settle time (or, following, until stopped)."""
        options, progress = self._options, self.progress
        empty_since: float | None = None
        while not self._failed and not self._stop.is_set():
            self._check_channels()
            ready = await self._count(control)
            progress.remaining = ready
            now = time.monotonic()
            if ready or self._order:
                empty_since = None
            elif empty_since is None:
                empty_since = now
            elif now - empty_since >= options.settle_s and not options.follow:
                progress.state = "drained"
                return
            stopped = asyncio.ensure_future(self._stop.wait())
            await asyncio.wait([stopped], timeout=POLL_S)
            stopped.cancel()

    def _check_channels(self) -> None:
        """Fail the queue when a channel it moves messages on was closed (by the gateway, say, for a
        message larger than it takes) or its connection was lost."""
        for channel in (self._consuming, *self._sink_channels()):
            if channel is not None and channel.closed is not None:
                self._fail(str(channel.closed))
                return

    async def _settle(self) -> None:
        """Wait (bounded) until every publish made is confirmed and acknowledged upstream."""
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        while self._order and not self._failed:
            self._check_channels()
            if time.monotonic() > deadline:
                raise WireError(f"{len(self._order)} publishes of '{self.name}' were not confirmed in time")
            await asyncio.sleep(0.05)

    def _fail(self, reason: str) -> None:
        if not self._failed:
            self._failed = reason
            self._stop_consuming()

    def _stop_consuming(self) -> None:
        consuming = self._consuming
        if consuming is not None:
            consuming.on_deliver = None

    def _attach(self, connection: Connection, hook: Callable[[], None]) -> None:
        """Run `hook` after each read of `connection` while the queue drains."""
        connection.after_read.append(hook)
        self._hooks.append((connection, hook))

    def _detach(self) -> None:
        for connection, hook in self._hooks:
            if hook in connection.after_read:
                connection.after_read.remove(hook)
        self._hooks.clear()

    # -- the hot path --------------------------------------------------------------------------------

    def _deliver(self, tag: int, redelivered: bool, properties: bytes, body: bytes) -> None:
        lane = self._lanes[self._turn]
        if lane.channel.closed is not None:  # nothing more on a closed channel: the rest stays upstream
            self._fail(str(lane.channel.closed))
            return
        lane.window.add(tag)
        self._order.append(tag)
        lane.out.append(lane.publish)
        lane.out.append(fast.encode_content(lane.channel.number, properties, body, self._sink.frame_max))
        if redelivered:
            self.progress.redelivered += 1

    def _flush_publishes(self) -> None:
        lane = self._lanes[self._turn] if self._lanes else None
        if lane is not None and lane.out:
            self._sink.write(b"".join(lane.out))
            lane.out.clear()
            self._turn = (self._turn + 1) % len(self._lanes)

    def _confirm(self, lane: _Lane, seq: int, multiple: bool, ok: bool) -> None:
        if self._failed:
            return  # a return came first: no more acks go upstream
        order, verdict, progress = self._order, self._verdict, self.progress
        settled = lane.window.settle(seq, multiple, ok)
        if len(self._lanes) == 1:  # one lane settles in delivery order already
            for _ in settled:
                order.popleft()
        else:
            verdict.update(settled)
            settled = []
            while order and order[0] in verdict:
                tag = order.popleft()
                settled.append((tag, verdict.pop(tag)))
        for tag, stored in settled:
            if stored:
                self._ack_to = tag
                progress.drained += 1
            else:
                self._ack_upstream()
                self._upstream.append(fast.encode_ack(self._consuming.number, fast.Nack(tag, False, True)))  # type: ignore[union-attr]
                progress.nacked += 1

    def _returned(self, reason: str) -> None:
        self._flush_acks()  # what was confirmed before the return is safe
        self._fail(f"the gateway returned a message of '{self.name}': {reason}")

    def _ack_upstream(self) -> None:
        if self._ack_to:
            self._upstream.append(fast.encode_ack(self._consuming.number, fast.Ack(self._ack_to, True)))  # type: ignore[union-attr]
            self._ack_to = 0

    def _flush_acks(self) -> None:
        self._ack_upstream()
        if self._upstream:
            self._source.write(b"".join(self._upstream))
            self._upstream.clear()
