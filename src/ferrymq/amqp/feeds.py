"""Pushing queues to their consumers. One `QueueFeed` per queue with consumers on this gateway pops
the queue's topic for the queue's consumer group (RocketMQ 5 pop: every gateway serving the queue
shares that group, so a message goes to one consumer of one gateway), as many messages as the
consumers have credit for (their prefetch), and hands them out in turn. A feed delivers at most one
pop's worth before the other feeds get the event loop, so a hot queue never holds up a cold one.

With the broker in this process, the registry hears of every arrival (`watch_arrivals`) and a feed pops
only when its queue may hold something: one pop per batch of new messages, rather than one more that
parks a long poll on each idle queue (thousands of mostly idle queues otherwise cost two pops per
message). With a remote broker, an idle feed parks a long poll instead.

A feed pops for every consumer of its queue at once, whoever they log in as, so a user's consume
quota is applied here, per delivery: a consumer whose user is over it gets nothing until the
user's bucket allows more (its share goes to the queue's other consumers), and every message
delivered to it is charged to its user."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, Protocol

from ferrymq.amqp.queue_settings import topic_queues
from ferrymq.messaging.api import MessageQueue, MessagingError
from ferrymq.meta.entities import Queue
from ferrymq.protocol.caller import CALLER
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.message_ext import MessageExt, decode_records
from ferrymq.protocol.pop import INIT_MODE_MIN, POP_CK, pop_retry_topic

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ferrymq.amqp.gateway import Gateway

log = logging.getLogger(__name__)
POP_BATCH = 32  # the most one pop brings (RocketMQ's limit)
POLL_MS = 5_000  # long poll of an empty queue; told of arrivals, the most a feed waits before a look
UNLIMITED = 1 << 30
UNLIMITED_QUOTA = float("inf")
RETRY_AFTER_S = 1.0  # after a pop the broker refused
GATHER_S = 0.001  # a consumer holding half its prefetch or more gets its freed credit this late
GATHER_FROM = 32  # ... when that half is at least this many deliveries (it has work meanwhile)
SETTLE_AFTER_S = 0.002  # acknowledgements gathered for one call to the broker (clients that ack each
# delivery send one ack per read: one broker call per turn of the event loop would be one per ack)


class Receiver(Protocol):
    """What a feed needs of a consumer's channel."""

    def credit(self) -> int:
        """How many more unacknowledged messages the channel takes (its global prefetch)."""
        ...

    def deliver(self, consumer: Consumer, message: MessageExt, handle: str) -> None: ...


class Consumer:
    __slots__ = ("channel", "exclusive", "feed", "in_flight", "no_ack", "prefetch", "tag", "user")

    def __init__(
        self,
        channel: Receiver,
        tag: str,
        feed: QueueFeed,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        user: str,
    ) -> None:
        self.channel = channel
        self.user = user  # whose consume quota its deliveries count against ("": nobody's)
        self.tag = tag
        self.feed = feed
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch  # 0: no limit
        self.in_flight = 0

    def credit(self) -> int:
        if self.no_ack:
            return self.channel.credit()
        own = self.prefetch - self.in_flight if self.prefetch else UNLIMITED
        return min(own, self.channel.credit())

    def settled(self, count: int = 1) -> None:
        """`count` of its deliveries were acknowledged or returned: it may take more."""
        self.in_flight -= count
        self.feed.wake()


class QueueFeed:
    def __init__(self, registry: FeedRegistry, queue: Queue) -> None:
        self.registry = registry
        self.queue = queue
        self.consumers: list[Consumer] = []
        self._turn = 0
        self._woken = asyncio.Event()
        self._held: deque[MessageExt] = deque()  # popped, waiting for credit
        self._arrived = True  # whether the queue may hold something since the last pop
        self._look_again = False  # whether to pop once more without waiting (see _run)
        self._task: asyncio.Task | None = None
        self._single_active = queue.arguments.get("x-single-active-consumer") is True
        self._quota_wait: float | None = None  # when users are over their quotas: until a token

    def add(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        if self._task is None or self._task.done():
            self._task = self.registry.tasks.spawn(self._run(), f"feed {self.queue.vhost}/{self.queue.name}")
        self.wake()

    def remove(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self.wake()

    async def leave(self, consumer: Consumer) -> None:
        """The consumer stops. Once nobody is left, what was popped for them goes back before this
        returns, so that a basic.get answered after the cancel-ok or close-ok finds it (as in RabbitMQ)."""
        self.remove(consumer)
        if not self.consumers and self._held:
            held, self._held = list(self._held), deque()
            await self.registry.requeue(self.queue, [m.properties[POP_CK] for m in held])

    def wake(self) -> None:
        self._woken.set()

    def arrival(self) -> None:
        """New messages in the queue or its retry topic: pop again."""
        self._arrived = True
        self._woken.set()

    async def _until_arrival(self) -> None:
        """Until new messages arrive or the consumers go; within POLL_MS the registry has a pop look
        anyway, for what no arrival reports (a paused group resumed, say)."""
        self.registry.waiting(self)
        try:
            while not self._arrived and self.consumers:
                self._woken.clear()
                await self._woken.wait()
        finally:
            self.registry.done_waiting(self)

    async def _run(self) -> None:
        CALLER.set(None)  # shared by every connection: no one user's quotas apply (the task copied
        # the context of the connection that started it)
        try:
            while self.consumers:
                self._woken.clear()  # a wake from here on ends the next wait at once
                allowed = self._allowed()
                if self._held:
                    self._hand_out(allowed)
                    if self._held:
                        await self._credit()  # for credit, or a quota's next token
                    else:
                        await asyncio.sleep(0)  # the other feeds' turn
                    continue
                want = sum(
                    int(min(c.credit(), POP_BATCH, allowed.get(c.user, POP_BATCH))) for c in self.consumers
                )
                if want <= 0:
                    await self._credit()
                    continue
                if not (self._arrived or self._look_again):
                    await self._until_arrival()
                    continue
                # with large prefetches, pop a quarter of them ahead (held here until credit frees)
                # rather than one message per acknowledgement; with small ones, only what fits
                ahead = (
                    0
                    if allowed
                    else sum(min(c.prefetch or POP_BATCH, POP_BATCH) for c in self.consumers) // 4
                )
                self._arrived = not self.registry.notified  # (an arrival during the pop sets it again)
                # a long poll all the same: the pop after an arrival finds the message at once, while
                # one that finds nothing (a paused group, another gateway was first) waits as before
                poll_ms = 0 if self._look_again else POLL_MS
                self._look_again = False
                found, more = await self.registry.take(self.queue, min(max(want, ahead), POP_BATCH), poll_ms)
                self._held.extend(found)
                if found and self._arrived and self.registry.notified and not more:
                    # the arrival that woke a pop waiting in the broker: the pop took what came, most
                    # likely, but one may have come after its read. A look that does not wait tells,
                    # rather than a pop that finds nothing and waits in the broker (two pops a message)
                    self._arrived, self._look_again = False, True
                else:
                    self._arrived = self._arrived or more
        finally:
            self.registry.feed_idle(self)
            held, self._held = list(self._held), deque()
            await self.registry.requeue(self.queue, [m.properties[POP_CK] for m in held])
            self.registry.feed_ended(self)

    async def _credit(self) -> None:
        """Until woken (by an acknowledgement, mostly, or a quota's next token). Consumers that all
        still hold half their prefetch or more get more a moment later rather than at each ack: the
        credit of many acks goes out as one pop and one write, not one delivery per ack, each a write
        of its own."""
        await self._until_woken()
        if all(c.in_flight >= GATHER_FROM and 2 * c.in_flight >= c.prefetch for c in self.consumers):
            await asyncio.sleep(GATHER_S)

    def ending(self) -> asyncio.Task | None:
        """Its task, while nobody is left to feed but a pop made for them may still bring messages
        to hand back."""
        task = self._task
        return task if not self.consumers and task is not None and not task.done() else None

    def _allowed(self) -> dict[str, float]:
        """What the users of its consumers who have a consume quota may take now (the others are
        not in it); notes how long until one over its quota may take more."""
        service, allowed, self._quota_wait = self.registry.service, {}, None
        for user in {c.user for c in self.consumers if c.user}:
            messages, wait = service.user_consume_allowance(user)
            if messages != UNLIMITED_QUOTA:
                allowed[user] = messages
            if messages < 1:
                self._quota_wait = wait if self._quota_wait is None else min(wait, self._quota_wait)
        return allowed

    async def _until_woken(self) -> None:
        """Until a wake, or (users over their quotas) until the next token."""
        wait = self._quota_wait
        timer = None if wait is None else asyncio.get_running_loop().call_later(max(wait, 0.001), self.wake)
        try:
            await self._woken.wait()
        finally:
            if timer is not None:
                timer.cancel()

    def _hand_out(self, allowed: dict[str, float]) -> None:
        """Give held messages to the consumers in turn, each within its credit and what its user's
        consume quota allows."""
        consumers, held = self.consumers[:1] if self._single_active else self.consumers, self._held
        settle_now: list[str] = []
        charged: dict[str, list[int]] = {}  # user -> [messages, bytes]
        misses = 0
        while held and consumers and misses < len(consumers):
            self._turn = (self._turn + 1) % len(consumers)
            consumer = consumers[self._turn]
            if consumer.credit() <= 0 or (allowed and allowed.get(consumer.user, 1) < 1):
                misses += 1
                continue
            misses = 0
            message = held.popleft()
            handle = message.properties[POP_CK]
            if consumer.no_ack:
                settle_now.append(handle)
            if allowed and consumer.user in allowed:
                allowed[consumer.user] -= 1
                charge = charged.setdefault(consumer.user, [0, 0])
                charge[0] += 1
                charge[1] += len(message.body)
            consumer.channel.deliver(consumer, message, handle)
        for user, (count, nbytes) in charged.items():
            self.registry.service.charge_user_consume(user, count, nbytes)
        if settle_now:
            self.registry.settle(self.queue, settle_now)


class FeedRegistry:
    """The feeds of this gateway by (vhost, queue), and the broker calls that settle deliveries."""

    def __init__(self, gateway: Gateway) -> None:
        self.service = gateway.service
        self.tasks = gateway.tasks
        self.invisible_ms = gateway.limits.consumer_timeout_ms
        self.screen = gateway.screen  # takes out popped messages not to deliver (expired ...)
        self.broker_queue = gateway.broker_queue
        self.ensure_topic = gateway.ensure_topic
        self._to_settle: dict[str, tuple[Queue, list[str]]] = {}  # by topic: handles to acknowledge
        self._requeued: set[str] = set()  # queues' topics with messages just handed back here
        self._ending: dict[str, QueueFeed] = {}  # by group: feeds handing back what they popped
        self._settle_timer: asyncio.TimerHandle | None = None
        self._feeds: dict[str, QueueFeed] = {}  # by consumer group: a queue's, or a broadcast consumer's
        # the feeds an arrival concerns, updated as each feed comes and goes: rebuilt whole at the first
        # arrival after a change, thousands of consumers starting or stopping one by one (a connection
        # with a consumer on every queue closing) held the event loop for seconds
        self._by_topic: dict[str, list[QueueFeed]] = {}
        self._unwatch = self.service.watch_arrivals(self._arrivals)
        self.notified = self._unwatch is not None  # told of arrivals: feeds need no long poll
        # feeds waiting for an arrival, those since the last sweep and those since the one before: one
        # timer looks for them all (a timer per feed was set and cancelled at every message)
        self._waiting_new: set[QueueFeed] = set()
        self._waiting_old: set[QueueFeed] = set()
        self._sweep: asyncio.TimerHandle | None = None

    def close(self) -> None:
        if self._settle_timer is not None:  # what the clients acknowledged goes now
            self._settle_timer.cancel()
            self._settle_pending()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    def waiting(self, feed: QueueFeed) -> None:
        """`feed` waits for an arrival: it looks anyway at the second sweep from now (every POLL_MS / 2:
        after POLL_MS / 2 to POLL_MS)."""
        self._waiting_new.add(feed)
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(POLL_MS / 2000, self._look_anyway)

    def done_waiting(self, feed: QueueFeed) -> None:
        self._waiting_new.discard(feed)
        self._waiting_old.discard(feed)

    def _look_anyway(self) -> None:
        due, self._waiting_old, self._waiting_new = self._waiting_old, self._waiting_new, set()
        for feed in due:
            feed.arrival()
        self._sweep = (
            asyncio.get_running_loop().call_later(POLL_MS / 2000, self._look_anyway)
            if self._waiting_old
            else None
        )

    def _arrivals(self, queues: list[tuple[str, int]]) -> None:
        by_topic = self._by_topic
        for topic, _ in queues:
            for feed in by_topic.get(topic, ()):
                feed.arrival()

    async def pop(self, queue: Queue, count: int, poll_ms: int) -> list[MessageExt]:
        """Up to `count` messages of `queue` to deliver (see `take`)."""
        return (await self.take(queue, count, poll_ms))[0]

    async def take(self, queue: Queue, count: int, poll_ms: int) -> tuple[list[MessageExt], bool]:
        """Up to `count` messages of `queue` to deliver, the highest priority level first (waiting up to
        `poll_ms` for one when there is none); expired ones and the like are screened out. What was
        handed back goes first (within its priority level), as in RabbitMQ. And whether more may be
        left: the pop brought all it could, or came from one level or the handed-back ones."""
        await self.ensure_topic(queue, known=True)
        levels = topic_queues(queue)
        if levels > 1:  # (a pop of one level takes that level's retry queue first: see ensure_topic)
            for level in range(levels - 1, -1, -1):
                found = await self.pop_place(queue, count, await self.broker_queue(queue.topic, level))
                if found:
                    return found, True
        elif queue.topic in self._requeued:
            found = await self._pop(queue, count, None, 0, pop_retry_topic(queue.group, queue.topic))
            if found:
                return await self.screen(queue, found), True
            self._requeued.discard(queue.topic)
        found = await self._pop(queue, count, None, poll_ms)
        return (await self.screen(queue, found) if found else found), len(found) >= count

    async def pop_place(self, queue: Queue, count: int, place: MessageQueue) -> list[MessageExt]:
        """Up to `count` messages of one broker queue of `queue`, screened, without waiting."""
        found = await self._pop(queue, count, place, 0)
        return await self.screen(queue, found) if found else found

    async def _pop(
        self, queue: Queue, count: int, place: MessageQueue | None, poll_ms: int, topic: str = ""
    ) -> list[MessageExt]:
        """A pop of the queue's topic (or of `topic`: its retry topic)."""
        try:
            outcome = await self.service.pop(
                queue.group, topic or queue.topic, count, self.invisible_ms, queue=place, poll_ms=poll_ms,
                init_mode=INIT_MODE_MIN,
            )  # fmt: skip
        except MessagingError as e:
            log.warning("popping %s: %s", queue.topic, e)
            await asyncio.sleep(RETRY_AFTER_S)
            return []
        if outcome.code == ResponseCode.SUCCESS:
            return decode_records(outcome.body)
        quiet = (
            (ResponseCode.POLLING_TIMEOUT, ResponseCode.TOPIC_NOT_EXIST)
            if topic
            else (ResponseCode.POLLING_TIMEOUT,)
        )
        if outcome.code not in quiet:  # (a retry topic appears with the first message handed back)
            log.warning("popping %s: %s (%s)", topic or queue.topic, outcome.remark, outcome.code)
            await asyncio.sleep(RETRY_AFTER_S)
        return []

    def feed(self, queue: Queue) -> QueueFeed:
        feed = self._feeds.get(queue.group)
        if feed is None or feed.queue.topic != queue.topic:
            if feed is not None:
                self._unindex(feed)
            feed = self._feeds[queue.group] = QueueFeed(self, queue)
            for topic in _topics_of(queue):
                self._by_topic.setdefault(topic, []).append(feed)
        return feed

    def _unindex(self, feed: QueueFeed) -> None:
        for topic in _topics_of(feed.queue):
            feeds = self._by_topic.get(topic)
            if feeds is not None and feed in feeds:
                feeds.remove(feed)
                if not feeds:
                    del self._by_topic[topic]

    def consumer_count(self, queue: Queue) -> int:
        """The queue's consumers on this gateway (broadcast consumers, each in a group of its own,
        are not among them)."""
        feed = self._feeds.get(queue.group)
        return 0 if feed is None else len(feed.consumers)

    def total_consumers(self) -> int:
        return sum(len(f.consumers) for f in list(self._feeds.values()))

    def consumers_of(self, queue: Queue) -> Iterable[Consumer]:
        """Every consumer of the queue on this gateway, broadcast ones included."""
        return [
            c for f in self._feeds.values() if (f.queue.vhost, f.queue.name) == (queue.vhost, queue.name)
            for c in f.consumers
        ]  # fmt: skip

    def feed_idle(self, feed: QueueFeed) -> None:
        group = feed.queue.group
        if self._feeds.get(group) is feed and not feed.consumers:
            del self._feeds[group]
            self._unindex(feed)
            self._ending[group] = feed

    def feed_ended(self, feed: QueueFeed) -> None:
        if self._ending.get(feed.queue.group) is feed:
            del self._ending[feed.queue.group]

    async def handed_back(self, queue: Queue, timeout_s: float) -> bool:
        """Whether a feed of `queue` whose consumers all went was still handing back what it had
        popped for them (waited for, up to `timeout_s`): a basic.get after a cancel or a close must
        find those messages, as in RabbitMQ, where they never left the queue."""
        feeds = (self._feeds.get(queue.group), self._ending.get(queue.group))
        tasks = [task for f in feeds if f is not None and (task := f.ending()) is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        return bool(tasks)

    def queue_gone(self, queue: Queue) -> None:
        """A queue was deleted (through any gateway): its consumers here are cancelled."""
        for consumer in self.consumers_of(queue):
            cancel = getattr(consumer.channel, "cancelled_by_broker", None)
            if cancel is not None:
                cancel(consumer)

    def settle(self, queue: Queue, handles: list[str]) -> None:
        """Acknowledge deliveries at the broker, in the background (the client has its answer): what
        every channel settles within SETTLE_AFTER_S goes as one batch ack per queue."""
        pending = self._to_settle.get(queue.topic)
        if pending is None:
            self._to_settle[queue.topic] = (queue, list(handles))
        else:
            pending[1].extend(handles)
        if self._settle_timer is None:
            self._settle_timer = asyncio.get_running_loop().call_later(SETTLE_AFTER_S, self._settle_pending)

    def _settle_pending(self) -> None:
        """One task for the round's acknowledgements of every queue (thousands of cold queues each
        with an acknowledgement a round would otherwise cost a task each)."""
        self._settle_timer = None
        pending, self._to_settle = self._to_settle, {}
        if pending:
            self.tasks.spawn(self._ack_all(list(pending.values())), "settle deliveries")

    async def _ack_all(self, pending: list[tuple[Queue, list[str]]]) -> None:
        if self.service.in_process:  # (each call is done at once: no round trips to overlap)
            for queue, handles in pending:
                await self._ack(queue, handles)
        else:
            await asyncio.gather(*(self._ack(queue, handles) for queue, handles in pending))

    async def _ack(self, queue: Queue, handles: list[str]) -> None:
        try:
            errors = await self.service.ack_batch(queue.group, queue.topic, handles)
        except MessagingError as e:
            log.warning("acknowledging %d messages of %s: %s", len(handles), queue.topic, e)
            return
        failed = [e for e in errors if e is not None]
        if failed:
            log.info(
                "%d of %d acknowledgements of %s were stale: %s",
                len(failed),
                len(handles),
                queue.topic,
                failed[0],
            )

    async def requeue(self, queue: Queue, handles: list[str]) -> None:
        """Make deliveries visible again at once (they come back marked redelivered), one after the
        other so that they come back in the order given."""
        if not handles:
            return
        if topic_queues(queue) == 1:
            self._requeued.add(queue.topic)
        failed: list[MessagingError] = []
        for handle in handles:
            try:
                await self.service.change_invisible_time(queue.group, queue.topic, handle, 0)
            except MessagingError as e:  # stale: redelivered meanwhile anyway
                failed.append(e)
        if failed:
            log.info("%d of %d requeues of %s failed: %s", len(failed), len(handles), queue.topic, failed[0])


def _topics_of(queue: Queue) -> tuple[str, str]:
    """Where arrivals concern a queue's feed: its topic and its retry topic."""
    return queue.topic, pop_retry_topic(queue.group, queue.topic)
