"""PushConsumer: messages are handed to a listener; queues, offsets and retries are looked after here.

RocketMQ's DefaultMQPushConsumer in asyncio. In CLUSTERING mode the members of a group split each
topic's queues among themselves (again every 20 s, and at once when a broker says the membership
changed) and keep offsets on the brokers; in BROADCASTING mode every member reads every queue and
keeps its offsets in a local file. Each owned queue has one long-polling pull loop that fills a
ProcessQueue; the offset committed for a queue is the lowest one still being consumed, so a crash
or a hand-over delivers a message again rather than losing it.

Concurrent listeners run many batches at once; a failed batch is sent back to the broker (which
redelivers it through `%RETRY%<group>`), or consumed again here after 5 s when that fails. Orderly
listeners get one batch at a time per queue, in queue order, only while this client holds the
queue's broker lock; a failure is retried in place after 1 s, never skipped, and only once it has
failed `max_reconsume_times` times (unlimited by default, as in RocketMQ) does it go to the
dead-letter queue `%DLQ%<group>` so the queue can go on.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ferrymq.client import notices
from ferrymq.client.dedupe import SeenIds
from ferrymq.client.hooks import ConsumeHook, hooked_consume
from ferrymq.client.instance import ClientError, ClientInstance, TopicRoute
from ferrymq.client.message import MessageExt, MessageQueue
from ferrymq.client.offset_store import LocalOffsetStore, OffsetStore, RemoteOffsetStore
from ferrymq.client.pull import PullResult, PullStatus, initial_offset, master_addr, pull, pull_addr
from ferrymq.client.rebalance import STRATEGIES, allocate, queue_order
from ferrymq.client.redelivery import Redelivery
from ferrymq.client.selector import MessageSelector, check_on_brokers
from ferrymq.net import RemotingError
from ferrymq.protocol.bodies import (
    ConsumerData,
    GetConsumerListByGroupResponseBody,
    LockBatchRequestBody,
    LockBatchResponseBody,
    SubscriptionData,
    UnlockBatchRequestBody,
    decode_body,
    encode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import UnregisterClientRequestHeader
from ferrymq.protocol.properties import Prop
from ferrymq.protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)

RETRY_PREFIX = "%RETRY%"
MESSAGE_MODELS = ("CLUSTERING", "BROADCASTING")
CONSUME_FROM_WHERE = {
    "last": "CONSUME_FROM_LAST_OFFSET",
    "first": "CONSUME_FROM_FIRST_OFFSET",
    "timestamp": "CONSUME_FROM_TIMESTAMP",
}
REBALANCE_INTERVAL = 20.0
LOCK_INTERVAL = 20.0  # renewal; brokers keep a lock 60 s
LOCK_STALE_AFTER = 30.0  # a lock not renewed for this long is no longer trusted here
LOCK_RETRY_DELAY = 0.5
SUSPEND_MS = 15_000  # long-polling hold asked of the broker
PULL_RETRY_DELAY = 3.0
FLOW_CONTROL_CHECK = 1.0
LOCAL_RETRY_DELAY = 5.0
ORDERLY_RETRY_DELAY = 1.0
ORDERLY_MAX_RECONSUME = 2**31 - 1  # Java's Integer.MAX_VALUE: an orderly message is never given up by default
RELEASE_WAIT = 3.0  # how long a dropped orderly queue waits for its current message
MIB = 1 << 20

_CALL_ERRORS = (ClientError, RemotingError)


class ConsumeResult(enum.Enum):
    """What a listener returns (RocketMQ's ConsumeConcurrentlyStatus); True and None count as SUCCESS,
    False as RECONSUME_LATER."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


Listener = Callable[[list[MessageExt]], Any]  # returns (async: resolves to) bool | ConsumeResult | None


@dataclass
class _Subscription:
    selector: MessageSelector
    listener: Listener | None  # None for the retry topic: its messages go to their original topic's
    version: int = field(default_factory=lambda: time.time_ns() // 1_000_000)

    def data(self, topic: str) -> SubscriptionData:
        return self.selector.subscription(topic, self.version)


class ProcessQueue:
    """One owned queue's messages that are pulled but not yet consumed, in offset order.

    Everything below the lowest of them is consumed, so that is the offset to commit (RocketMQ's
    ProcessQueue); a message that failed stays here until it succeeds and holds the offset back.
    """

    def __init__(self, mq: MessageQueue) -> None:
        self.mq = mq
        self.messages: dict[int, MessageExt] = {}  # queue offset -> message; pulls come in order
        self.size = 0  # body bytes held
        self.next_offset: int | None = None  # where the next pull starts; None until looked up
        self.dropped = False
        self.locked_at: float | None = None  # monotonic time of the broker's last lock grant
        self.room = asyncio.Event()  # consumption freed room: the pull loop may go on
        self.work = asyncio.Event()  # messages, a lock or a drop arrived: the orderly loop may go on
        self.tasks: list[asyncio.Task] = []  # the pull loop, then the orderly consume loop if any

    def add(self, messages: Iterable[MessageExt]) -> list[MessageExt]:
        fresh = [m for m in messages if m.queue_offset not in self.messages]
        for m in fresh:
            self.messages[m.queue_offset] = m
            self.size += len(m.body)
        if fresh:
            self.work.set()
        return fresh

    def remove(self, messages: Iterable[MessageExt]) -> None:
        for m in messages:
            if self.messages.pop(m.queue_offset, None) is not None:
                self.size -= len(m.body)
        self.room.set()

    def head(self, n: int) -> list[MessageExt]:
        return list(itertools.islice(self.messages.values(), n))

    def commit_offset(self) -> int | None:
        return next(iter(self.messages)) if self.messages else self.next_offset

    def locked(self) -> bool:
        return self.locked_at is not None and time.monotonic() - self.locked_at < LOCK_STALE_AFTER

    def set_locked(self, granted: bool) -> None:
        self.locked_at = time.monotonic() if granted else None
        if granted:
            self.work.set()


class PushConsumer:
    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        message_model: str = "CLUSTERING",
        consume_from: str = "last",
        consume_timestamp: int | None = None,
        allocation: str = "average",
        orderly: bool = False,
        pull_batch_size: int = 32,
        consume_batch_size: int = 1,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        max_reconsume_times: int = -1,
        consume_timeout: float = 15,
        consume_concurrency: int = 20,
        instance: ClientInstance | None = None,
        offset_store_dir: str | os.PathLike | None = None,
        enable_trace: bool = False,
        trace_topic: str | None = None,
        dedupe_window: int = 0,
    ) -> None:
        for name, value, allowed in (
            ("message_model", message_model, MESSAGE_MODELS),
            ("consume_from", consume_from, tuple(CONSUME_FROM_WHERE)),
            ("allocation", allocation, tuple(STRATEGIES)),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, not {value!r}")
        self.group = group
        self.instance = instance or ClientInstance(namesrv_addr)
        self._own_instance = instance is None
        self.message_model = message_model
        self.clustering = message_model == "CLUSTERING"
        self.consume_from = consume_from
        self.consume_timestamp = consume_timestamp or int(time.time() * 1000) - 30 * 60 * 1000
        self.allocation = allocation
        self.orderly = orderly
        self.pull_batch_size = pull_batch_size
        self.consume_batch_size = consume_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        # RocketMQ's -1: 16 attempts for concurrent listeners, unlimited for orderly ones
        self.max_reconsume_times = (
            max_reconsume_times if max_reconsume_times >= 0 else ORDERLY_MAX_RECONSUME if orderly else 16
        )
        self._redelivery = Redelivery(self, consume_timeout)  # minutes, as RocketMQ's consumeTimeout
        self.offsets: OffsetStore = (
            RemoteOffsetStore(self.instance, group, self._addr)
            if self.clustering
            else LocalOffsetStore(offset_store_dir, self.instance.client_id, group)
        )
        self._locking = orderly and self.clustering  # broadcasting members share nothing to lock
        self._subs: dict[str, _Subscription] = {}
        self._queues: dict[MessageQueue, ProcessQueue] = {}
        self._consumes: set[asyncio.Task] = set()  # concurrent consume batches, running or waiting
        self._loops: list[asyncio.Task] = []
        self._slots = asyncio.Semaphore(consume_concurrency)
        self._stop = asyncio.Event()
        self._rebalance_now = asyncio.Event()
        self._known_brokers: set[str] = set()
        self._started = False
        self.consume_hooks: list[ConsumeHook] = []
        # Msg ids of recently consumed messages, to drop repeats (0: every delivery is consumed).
        self.seen = SeenIds(dedupe_window) if dedupe_window else None
        self.trace = None
        if enable_trace:
            from ferrymq.client.trace import trace_consumes  # trace.py writes with a Producer

            self.trace = trace_consumes(self, trace_topic)

    # --- lifecycle -------------------------------------------------------------------------------

    def subscribe(
        self, topic: str, expression: str | MessageSelector = "*", listener: Listener | None = None
    ) -> None:
        """Deliver `topic`'s messages matching `expression` ("*", "TagA || TagB", or a
        MessageSelector such as `MessageSelector.sql("a > 5")`) to `listener`.

        The listener takes a list of MessageExt (`consume_batch_size` at most, default 1), may be
        `async def` or a plain function (run in a worker thread, so it may block), and returns
        True / None / ConsumeResult.SUCCESS, or False / ConsumeResult.RECONSUME_LATER (or raises) to
        have the messages again later.
        """
        if listener is None:
            raise TypeError("subscribe() needs a listener")
        if self._started:
            raise ClientError("subscribe before start()")
        self._subs[topic] = _Subscription(MessageSelector.of(expression), listener)

    async def start(self) -> None:
        """Join the group, take this member's queues and start pulling them."""
        if not self._subs:
            raise ClientError("subscribe to a topic before start()")
        if self._stop.is_set():
            raise ClientError("a consumer that was shut down cannot start again")
        if self.group in self.instance.consumers:
            raise ClientError(f"group {self.group} already has a consumer in this client instance")
        try:  # a selector the brokers cannot evaluate fails here, not silently in every pull
            for topic, sub in self._subs.items():
                await check_on_brokers(self.instance, self.group, topic, sub.selector)
        except ClientError:
            if self._own_instance:
                await self.instance.close()
            raise
        if self._own_instance:
            await self.instance.start()
        if self.clustering:
            self._subs[self.retry_topic] = _Subscription(MessageSelector.tag("*"), None)
        notices.listen(self.instance, self.group, notices.GroupListener(self._rebalance_now.set, self._reset))
        self.instance.consumers[self.group] = self._consumer_data
        self._started = True
        if self.trace is not None:
            await self.trace.start()
        self.offsets.start()
        await self._rebalance()
        loop = asyncio.get_running_loop()
        self._loops = [loop.create_task(self._rebalance_loop())]
        if self._locking:
            self._loops.append(loop.create_task(self._lock_loop()))
        if self.clustering and not self.orderly:
            self._loops.append(loop.create_task(self._redelivery.watch_timeouts(self._queues, self._stop)))

    async def shutdown(self, timeout: float = 10.0) -> None:
        """Stop pulling, let consumes in flight finish (up to `timeout` s), commit, leave the group."""
        if not self._started:
            return
        self._started = False
        self._stop.set()
        self._rebalance_now.set()
        await _finish(self._loops, timeout)
        queues = list(self._queues.values())
        await _finish([pq.tasks[0] for pq in queues], 0)
        for pq in queues:
            pq.work.set()
        await _finish([*self._consumes, *(t for pq in queues for t in pq.tasks[1:])], timeout)
        for pq in queues:
            self._track(pq)
            pq.dropped = True
        await self.offsets.close()
        await self._redelivery.close()
        if self._locking:
            await self._unlock(queues)
        self.instance.consumers.pop(self.group, None)
        await self._unregister()
        notices.forget(self.instance, self.group)
        if self.trace is not None:
            await self.trace.stop()
        if self._own_instance:
            await self.instance.close()

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.shutdown()

    @property
    def retry_topic(self) -> str:
        return RETRY_PREFIX + self.group

    @property
    def queues(self) -> list[MessageQueue]:
        """The queues this member consumes now."""
        return sorted(self._queues, key=queue_order)

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group, consume_type="CONSUME_PASSIVELY", message_model=self.message_model,
            consume_from_where=CONSUME_FROM_WHERE[self.consume_from],
            subscription_data_set=[sub.data(topic) for topic, sub in self._subs.items()],
        )  # fmt: skip

    async def _unregister(self) -> None:
        header = UnregisterClientRequestHeader(client_id=self.instance.client_id, consumer_group=self.group)
        for addr in self.instance.broker_addrs():
            request = RemotingCommand(RequestCode.UNREGISTER_CLIENT, ext_fields=header.to_ext_fields())
            try:
                await self.instance.invoke(addr, request)
            except RemotingError as e:
                log.warning("unregistering group %s from %s failed: %s", self.group, addr, e)

    async def _idle(self, seconds: float) -> bool:
        """Wait `seconds` unless shutting down; True when shutting down."""
        await _wait(self._stop, seconds)
        return self._stop.is_set()

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._consumes.add(task)
        task.add_done_callback(self._consumes.discard)

    # --- rebalance -------------------------------------------------------------------------------

    async def _rebalance_loop(self) -> None:
        while not self._stop.is_set():
            await _wait(self._rebalance_now, REBALANCE_INTERVAL)
            self._rebalance_now.clear()  # a notice arriving during the rebalance below starts another
            if not self._stop.is_set():
                try:
                    await self._rebalance()
                except Exception:
                    log.exception("rebalance of group %s failed", self.group)

    async def _rebalance(self) -> None:
        """Work out this member's queues of every subscribed topic; start new ones, release lost ones."""
        routes: dict[str, TopicRoute] = {}
        for topic in list(self._subs):
            try:
                route = await self.instance.existing_route(topic)
            except _CALL_ERRORS as e:
                log.warning("no route for topic %s (group %s): %s", topic, self.group, e)
                continue
            if route is not None:
                routes[topic] = route
        brokers = self.instance.broker_addrs()
        if not brokers <= self._known_brokers:  # tell new brokers about us before asking who is in
            self._known_brokers = brokers
            await self.instance.heartbeat_all()
        for topic, route in routes.items():
            try:
                wanted = await self._allocated(route)
            except _CALL_ERRORS as e:
                log.warning("rebalance of topic %s for group %s failed: %s", topic, self.group, e)
                continue
            await self._assign(topic, wanted)

    async def _allocated(self, route: TopicRoute) -> set[MessageQueue]:
        if not self.clustering:
            return set(route.read_queues)
        ids = await self._consumer_ids(route)
        return set(allocate(self.allocation, self.instance.client_id, ids, route.read_queues))

    async def _consumer_ids(self, route: TopicRoute) -> list[str]:
        errors = []
        for addr in sorted(set(route.masters.values())):
            request = RemotingCommand(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                      ext_fields={"consumerGroup": self.group})  # fmt: skip
            try:
                response = await self.instance.invoke(addr, request)
            except RemotingError as e:
                errors.append(f"{addr}: {e}")
                continue
            if response.code == ResponseCode.SUCCESS:
                return decode_body(GetConsumerListByGroupResponseBody, response.body).consumer_id_list
            errors.append(f"{addr}: {response.remark}")
        raise ClientError(f"cannot list the members of group {self.group}: " + "; ".join(errors))

    async def _assign(self, topic: str, wanted: set[MessageQueue]) -> None:
        for mq, pq in list(self._queues.items()):
            if mq.topic == topic and mq not in wanted:
                await self._release(pq)
        new = [ProcessQueue(mq) for mq in sorted(wanted - self._queues.keys(), key=queue_order)]
        await self._position(new)
        for pq in new:
            self._run(pq)
            log.info("%s of group %s now consumes %s queue %d of %s", self.instance.client_id, self.group,
                     pq.mq.topic, pq.mq.queue_id, pq.mq.broker_name)  # fmt: skip

    def _run(self, pq: ProcessQueue) -> None:
        """Start pulling (and, orderly, consuming) a queue that is now this member's."""
        loop = asyncio.get_running_loop()
        self._queues[pq.mq] = pq
        pq.tasks.append(loop.create_task(self._pull_loop(pq)))
        if self.orderly:
            pq.tasks.append(loop.create_task(self._consume_orderly(pq)))

    async def _reset(self, offsets: dict[MessageQueue, int]) -> None:
        """The broker reset the group's offsets (and stored them): drop what was pulled of those
        queues and go on from the new offsets at once."""
        for mq, offset in offsets.items():
            old = self._queues.get(mq)
            if old is None or self._stop.is_set():
                continue
            old.dropped = True  # consumes still running finish without committing
            old.work.set()
            await _finish(old.tasks[:1], 0)
            await _finish(old.tasks[1:], RELEASE_WAIT)  # orderly: its current message completes first
            pq = ProcessQueue(mq)
            pq.next_offset, pq.locked_at = offset, old.locked_at  # the broker lock stays ours
            self.offsets.update(mq, offset)
            self._run(pq)

    async def _position(self, pqs: list[ProcessQueue]) -> None:
        """Lock (orderly) and find the start offsets of new queues now, so that once `start()` or a
        rebalance returns, where consumption begins is settled; what fails here the pull loop retries."""
        if self._locking:
            for same_broker in _by_broker(pqs).values():
                try:
                    await self._lock(same_broker)
                except _CALL_ERRORS as e:
                    log.warning("locking queues of group %s failed: %s", self.group, e)
        for pq in pqs:
            if self._locking and not pq.locked():
                continue
            try:
                pq.next_offset = await self._start_offset(pq.mq)
            except _CALL_ERRORS as e:
                log.warning("no start offset for %s queue %d yet: %s", pq.mq.topic, pq.mq.queue_id, e)

    async def _release(self, pq: ProcessQueue) -> None:
        """Stop a queue given to another member: commit where it got to, then let go of its lock."""
        del self._queues[pq.mq]
        pq.dropped = True
        pq.work.set()
        await _finish(pq.tasks[:1], 0)
        finished = True
        if self.orderly:  # its current message completes first, so the next owner goes on after it
            done, _ = await asyncio.wait(pq.tasks[1:], timeout=RELEASE_WAIT)
            finished = bool(done)
        offset = pq.commit_offset()
        if offset is not None:
            self.offsets.update(pq.mq, offset)
        await self.offsets.persist([pq.mq])
        self.offsets.remove(pq.mq)
        if self._locking and finished:  # unfinished: the broker lock expires, nobody overlaps it
            await self._unlock([pq])
        log.info("%s of group %s released %s queue %d of %s", self.instance.client_id, self.group,
                 pq.mq.topic, pq.mq.queue_id, pq.mq.broker_name)  # fmt: skip

    # --- queue locks (orderly) -------------------------------------------------------------------

    async def _lock_loop(self) -> None:
        while not await self._idle(LOCK_INTERVAL):
            for pqs in _by_broker(self._queues.values()).values():
                try:
                    await self._lock(pqs)
                except _CALL_ERRORS as e:
                    log.warning("renewing queue locks of group %s failed: %s", self.group, e)

    async def _lock(self, pqs: list[ProcessQueue]) -> None:
        """Lock (or renew) queues of one broker; each queue learns whether it holds its lock."""
        response = await self._lock_request(RequestCode.LOCK_BATCH_MQ, LockBatchRequestBody, pqs)
        granted = set(decode_body(LockBatchResponseBody, response.body).lock_ok_mq_set)
        for pq in pqs:
            pq.set_locked(pq.mq in granted)

    async def _unlock(self, pqs: list[ProcessQueue]) -> None:
        for same_broker in _by_broker(pqs).values():
            try:
                await self._lock_request(RequestCode.UNLOCK_BATCH_MQ, UnlockBatchRequestBody, same_broker)
            except _CALL_ERRORS as e:
                log.warning("unlocking queues of group %s failed: %s", self.group, e)

    async def _lock_request(
        self, code: int, body_type: type[LockBatchRequestBody], pqs: list[ProcessQueue]
    ) -> RemotingCommand:
        body = body_type(consumer_group=self.group, client_id=self.instance.client_id,
                         mq_set=[pq.mq for pq in pqs])  # fmt: skip
        response = await self.instance.invoke(
            await self._addr(pqs[0].mq), RemotingCommand(code, body=encode_body(body))
        )
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"queue lock request {code} refused: {response.remark}")
        return response

    # --- pulling ---------------------------------------------------------------------------------

    async def _pull_loop(self, pq: ProcessQueue) -> None:
        """Long-poll one queue while it is ours, pausing while its consumers are behind."""
        mq, selector = pq.mq, self._subs[pq.mq.topic].selector
        while True:
            try:
                if self._locking and not pq.locked():
                    await self._lock([pq])
                    if not pq.locked():
                        await asyncio.sleep(LOCK_RETRY_DELAY)
                        continue
                if pq.next_offset is None:  # after the lock: the previous owner has committed by then
                    pq.next_offset = await self._start_offset(mq)
                if (
                    len(pq.messages) > self.pull_threshold_for_queue
                    or pq.size > self.pull_threshold_size_for_queue * MIB
                ):
                    pq.room.clear()
                    await _wait(pq.room, FLOW_CONTROL_CHECK)
                    continue
                result = await pull(
                    self.instance, await pull_addr(self.instance, mq), mq, self.group, pq.next_offset,
                    selector=selector, max_messages=self.pull_batch_size, suspend_ms=SUSPEND_MS,
                    commit_offset=self.offsets.get(mq) if self.clustering else None,
                )  # fmt: skip
            except Exception as e:  # whatever it was, the queue must not stop for good
                log.warning("pulling %s queue %d for group %s failed: %s", mq.topic, mq.queue_id, self.group,
                            e, exc_info=not isinstance(e, _CALL_ERRORS))  # fmt: skip
                await asyncio.sleep(PULL_RETRY_DELAY)
                continue
            self._pulled(pq, result)

    def _pulled(self, pq: ProcessQueue, result: PullResult) -> None:
        if result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning("offset %d of %s queue %d is gone; going on from %d",
                        pq.next_offset, pq.mq.topic, pq.mq.queue_id, result.next_begin_offset)  # fmt: skip
        if result.status is not PullStatus.NO_NEW_MSG:
            pq.next_offset = result.next_begin_offset
        for m in result.messages:  # a redelivery from the retry topic goes to its original topic's listener
            if m.topic.startswith(RETRY_PREFIX) and Prop.RETRY_TOPIC in m.properties:
                m.topic = m.properties[Prop.RETRY_TOPIC]
        fresh = pq.add(result.messages)
        self._track(pq)
        if not self.orderly:
            for batch in _batches(fresh, self.consume_batch_size):
                self._spawn(self._consume(pq, batch))

    async def _start_offset(self, mq: MessageQueue) -> int:
        """The stored offset, or for a queue new to the group where `consume_from` says
        (retry queues: from their start, unless starting from a time)."""
        stored = await self.offsets.read(mq)
        if stored is not None:
            return stored
        rule = self.consume_from
        if mq.topic.startswith(RETRY_PREFIX):  # retry queues start at their beginning, or at the end by time
            rule = {"last": "first", "timestamp": "last"}.get(rule, rule)
        return await initial_offset(self.instance, await self._addr(mq), mq, rule, self.consume_timestamp)

    async def _addr(self, mq: MessageQueue) -> str:
        return await master_addr(self.instance, mq)

    def _track(self, pq: ProcessQueue) -> None:
        """Note the queue's offset to commit (persisted by the offset store's next round)."""
        offset = pq.commit_offset()
        if offset is not None and not pq.dropped:
            self.offsets.update(pq.mq, offset)

    # --- consuming -------------------------------------------------------------------------------

    async def _consume(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        """One concurrent batch: on failure send it back for redelivery, or retry it here in 5 s."""
        async with self._slots:
            if pq.dropped or self._stop.is_set():  # left in the queue: its offset was not passed
                return
            Redelivery.starting(messages)
            ok = await self._call_listener(messages)
        if pq.dropped:
            return
        messages = [m for m in messages if pq.messages.get(m.queue_offset) is m]  # not timed out meanwhile
        again = []
        if not ok and self.clustering:
            again = await self._send_back(pq.mq, messages)
        elif not ok:
            log.warning("broadcast consumer %s failed %d messages; they are not retried", self.group,
                        len(messages))  # fmt: skip
        pq.remove(m for m in messages if m not in again)
        self._track(pq)
        if again:
            for m in again:
                m.reconsume_times += 1
            self._spawn(self._consume_later(pq, again))

    async def _consume_later(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        if not await self._idle(LOCAL_RETRY_DELAY):
            await self._consume(pq, messages)

    async def _send_back(self, mq: MessageQueue, messages: list[MessageExt]) -> list[MessageExt]:
        """Hand failed messages back for redelivery; return those to consume again here."""
        return await self._redelivery.send_back(mq, messages)

    async def _consume_orderly(self, pq: ProcessQueue) -> None:
        """The queue's messages one batch at a time, in order, while locked; retry a failure in place."""
        while not pq.dropped and not self._stop.is_set():
            if not pq.messages or (self._locking and not pq.locked()):
                pq.work.clear()
                await _wait(pq.work, LOCK_RETRY_DELAY)
                continue
            batch = next(_batches(pq.head(self.consume_batch_size), self.consume_batch_size))
            if await self._call_listener(batch):
                pq.remove(batch)
                self._track(pq)
                continue
            if await self._give_up(pq, batch):  # every failed message went to the dead-letter queue
                pq.remove(batch)
                self._track(pq)
                continue
            await self._idle(ORDERLY_RETRY_DELAY)  # RocketMQ's SUSPEND_CURRENT_QUEUE_A_MOMENT

    async def _give_up(self, pq: ProcessQueue, batch: list[MessageExt]) -> bool:
        """After an orderly failure: messages that used up their attempts go to `%DLQ%<group>`
        (CONSUMER_SEND_MSG_BACK with delay level -1); True when that was all of them, False when
        the batch is to be consumed again in place (RocketMQ's checkReconsumeTimes)."""
        again = False
        for m in batch:
            if m.reconsume_times < self.max_reconsume_times or await self._redelivery.send_back(
                pq.mq, [m], -1
            ):
                m.reconsume_times += 1
                again = True
        return not again

    async def _call_listener(self, messages: list[MessageExt]) -> bool:
        """True when the listener consumed the batch (consume hooks see it before and after); with a
        dedupe window, messages consumed before count as consumed and are not passed on."""
        seen = self.seen
        if seen is not None:
            messages = seen.claim(messages)
            if not messages:
                return True
        if self.consume_hooks:
            ok = await hooked_consume(self.consume_hooks, self.group, messages, self._listen(messages))
        else:
            ok = await self._listen(messages)
        if not ok and seen is not None:
            seen.release(messages)
        return ok

    async def _listen(self, messages: list[MessageExt]) -> bool:
        topic = messages[0].topic
        sub = self._subs.get(topic)
        if sub is None or sub.listener is None:
            log.warning("group %s has no listener for topic %s: %d messages skipped", self.group, topic,
                        len(messages))  # fmt: skip
            return True
        listener = sub.listener
        try:
            if inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(
                getattr(listener, "__call__", None)  # noqa: B004 - an object with an async __call__
            ):
                result = await listener(messages)
            else:
                result = await asyncio.to_thread(listener, messages)
        except Exception:
            log.exception("listener of group %s failed on %d messages of %s", self.group, len(messages),
                          topic)  # fmt: skip
            return False
        return result is not False and result is not ConsumeResult.RECONSUME_LATER


# --- helpers --------------------------------------------------------------------------------------


async def _wait(event: asyncio.Event, timeout: float) -> None:
    """Wait for `event` at most `timeout` s; callers check their condition again either way."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass


async def _finish(tasks: Iterable[asyncio.Task], timeout: float) -> None:
    """Let tasks end within `timeout` s, then cancel the rest and wait until they have unwound."""
    tasks = list(tasks)
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=timeout) if timeout > 0 else (set(), set(tasks))
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)


def _batches(messages: list[MessageExt], size: int) -> Iterator[list[MessageExt]]:
    """Runs of at most `size` messages of one topic (a retry queue mixes topics, each with its listener)."""
    batch: list[MessageExt] = []
    for m in messages:
        if batch and (len(batch) == size or m.topic != batch[0].topic):
            yield batch
            batch = []
        batch.append(m)
    if batch:
        yield batch


def _by_broker(pqs: Iterable[ProcessQueue]) -> dict[str, list[ProcessQueue]]:
    grouped: dict[str, list[ProcessQueue]] = {}
    for pq in pqs:
        grouped.setdefault(pq.mq.broker_name, []).append(pq)
    return grouped
