"""PushConsumer: messages are handed to a listener; queues, offsets and retries are looked after here.

RocketMQ's DefaultMQPushConsumer in asyncio. In CLUSTERING mode the members of a group split each
topic's queues among themselves and keep offsets on the brokers; in BROADCASTING mode every member
reads every queue and keeps its offsets in a local file. The offset committed for a queue is the
lowest one still being consumed, so a crash or a hand-over delivers a message again rather than
losing it.

This class wires the parts and runs their tasks in one task group:

- rebalancer.py: which queues are this member's (queue_locks.py: their broker locks, orderly);
- puller.py: one long-polling loop per owned queue filling its ProcessQueue (process_queue.py);
- consume_concurrently.py / consume_orderly.py: handing the pulled messages to the listener
  (listener.py), and redelivery.py: sending failed and overdue messages back to the broker;
- offset_store.py: where the offsets to commit go.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from ferrymq.client import notices
from ferrymq.client.aio import finish
from ferrymq.client.consume_concurrently import ConcurrentConsumption
from ferrymq.client.consume_orderly import OrderlyConsumption
from ferrymq.client.dedupe import SeenIds
from ferrymq.client.hooks import ConsumeHook, Hooks
from ferrymq.client.instance import ClientError, ClientInstance, TLSOption
from ferrymq.client.listener import ConsumeResult, Listener, Listeners, Subscription
from ferrymq.client.message import RETRY_PREFIX, MessageExt, MessageQueue
from ferrymq.client.offset_store import LocalOffsetStore, OffsetStore, RemoteOffsetStore
from ferrymq.client.process_queue import ProcessQueue
from ferrymq.client.pull import master_addr
from ferrymq.client.puller import Puller, PullSettings
from ferrymq.client.queue_locks import QueueLocks
from ferrymq.client.rebalance import STRATEGIES, queue_order
from ferrymq.client.rebalancer import Rebalancer
from ferrymq.client.redelivery import Redelivery
from ferrymq.client.selector import MessageSelector, check_on_brokers
from ferrymq.client.trace import TraceDispatcher
from ferrymq.net import RemotingError
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.protocol.bodies import ConsumerData
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.headers import UnregisterClientRequestHeader
from ferrymq.protocol.remoting import RemotingCommand

__all__ = ["CONSUME_FROM_WHERE", "ConsumeResult", "Listener", "PushConsumer"]

log = logging.getLogger(__name__)

MESSAGE_MODELS = ("CLUSTERING", "BROADCASTING")
CONSUME_FROM_WHERE = {
    "last": "CONSUME_FROM_LAST_OFFSET",
    "first": "CONSUME_FROM_FIRST_OFFSET",
    "timestamp": "CONSUME_FROM_TIMESTAMP",
}
ORDERLY_MAX_RECONSUME = 2**31 - 1  # Java's Integer.MAX_VALUE: an orderly message is never given up by default


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
        tls: TLSOption = False,
        access_key: str | None = None,
        secret_key: str | None = None,
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
        self.instance = instance or ClientInstance(
            namesrv_addr, tls=tls, access_key=access_key, secret_key=secret_key
        )
        self._own_instance = instance is None
        self.message_model = message_model
        self.clustering = message_model == "CLUSTERING"
        self.consume_from = consume_from
        self.orderly = orderly
        # RocketMQ's -1: 16 attempts for concurrent listeners, unlimited for orderly ones
        self.max_reconsume_times = (
            max_reconsume_times if max_reconsume_times >= 0 else ORDERLY_MAX_RECONSUME if orderly else 16
        )
        self.offsets: OffsetStore = (
            RemoteOffsetStore(self.instance, group, self._addr)
            if self.clustering
            else LocalOffsetStore(offset_store_dir, self.instance.client_id, group)
        )
        self.hooks = Hooks()
        self.trace = (
            self.hooks.add(TraceDispatcher(self.instance, group, trace_topic)) if enable_trace else None
        )
        # Msg ids of recently consumed messages, to drop repeats (0: every delivery is consumed).
        self.seen = SeenIds(dedupe_window) if dedupe_window else None
        self._subs: dict[str, Subscription] = {}
        self._tasks = BackgroundTasks(f"push consumer {group}")
        self._loops: list[asyncio.Task] = []  # rebalancing, lock renewal, consume timeouts
        self._stop = asyncio.Event()
        self._started = False

        self._redelivery = Redelivery(
            self.instance, group, max_reconsume_times=self.max_reconsume_times, addr_of=self._addr,
            consume_timeout_minutes=consume_timeout,  # minutes, as RocketMQ's consumeTimeout
        )  # fmt: skip
        locking = orderly and self.clustering  # broadcasting members share nothing to lock
        self._locks = QueueLocks(self.instance, group, self._addr) if locking else None
        listeners = Listeners(group, self._subs, self.hooks.consume, self.seen)
        self._consumption: ConcurrentConsumption | OrderlyConsumption = (
            OrderlyConsumption(
                listeners=listeners, redelivery=self._redelivery, locking=locking,
                batch_size=consume_batch_size, max_reconsume_times=self.max_reconsume_times,
                settled=self._track, stop=self._stop,
            )
            if orderly
            else ConcurrentConsumption(
                group, tasks=self._tasks, listeners=listeners,
                redelivery=self._redelivery if self.clustering else None, batch_size=consume_batch_size,
                concurrency=consume_concurrency, settled=self._track, stop=self._stop,
            )
        )  # fmt: skip
        settings = PullSettings(
            batch_size=pull_batch_size, threshold_count=pull_threshold_for_queue,
            threshold_mib=pull_threshold_size_for_queue, consume_from=consume_from,
            consume_timestamp=consume_timestamp or int(time.time() * 1000) - 30 * 60 * 1000,
            commit_in_pull=self.clustering,
        )  # fmt: skip
        self._puller = Puller(
            self.instance, group, settings, offsets=self.offsets, locks=self._locks,
            selector_of=lambda topic: self._subs[topic].selector, pulled=self._pulled,
            dead_letter=self._redelivery.dead_letter,
        )  # fmt: skip
        self._rebalancer = Rebalancer(
            self.instance, group, allocation=allocation if self.clustering else None,
            topics=lambda: list(self._subs), offsets=self.offsets, locks=self._locks,
            start_offset=self._puller.start_offset, run=self._run,
        )  # fmt: skip

    @property
    def consume_hooks(self) -> list[ConsumeHook]:
        return self.hooks.consume

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
        self._subs[topic] = Subscription(MessageSelector.of(expression), listener)

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
            self._subs[self.retry_topic] = Subscription(MessageSelector.tag("*"), None)
        notices.listen(
            self.instance, self.group, notices.GroupListener(self._rebalancer.wanted.set, self._reset)
        )
        self.instance.consumers[self.group] = self._consumer_data
        self._started = True
        await self.hooks.start()
        self.offsets.start()
        await self._rebalancer.rebalance()
        owned, stop = self._rebalancer.queues.values, self._stop
        loops = {"rebalance": self._rebalancer.loop(stop)}
        if self._locks is not None:
            loops["lock renewal"] = self._locks.renew(owned, stop)
        if self.clustering and not self.orderly:
            loops["consume timeouts"] = self._redelivery.watch_timeouts(owned, self._track, stop)
        self._loops = [self._tasks.spawn(loop, name=f"{name} {self.group}") for name, loop in loops.items()]

    async def shutdown(self, timeout: float = 10.0) -> None:
        """Stop pulling, let consumes in flight finish (up to `timeout` s), commit, leave the group."""
        if not self._started:
            return
        self._started = False
        self._stop.set()
        self._rebalancer.wanted.set()
        await finish(self._loops, timeout)
        queues = list(self._rebalancer.queues.values())
        await finish([pq.tasks[0] for pq in queues], 0)
        for pq in queues:
            pq.work.set()
        await self._consumption.drain(timeout)
        await finish([t for pq in queues for t in pq.tasks[1:]], timeout)
        await self._tasks.close()
        for pq in queues:
            self._track(pq)
            pq.dropped = True
        await self.offsets.close()
        await self._redelivery.close()
        if self._locks is not None:
            await self._locks.unlock_all(queues)
        self.instance.consumers.pop(self.group, None)
        await self._unregister()
        notices.forget(self.instance, self.group)
        await self.hooks.stop()
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
        return sorted(self._rebalancer.queues, key=queue_order)

    # --- wiring ----------------------------------------------------------------------------------

    def _run(self, pq: ProcessQueue) -> None:
        """Start pulling (and, orderly, consuming) a queue that is now this member's."""
        name = f"{self.group} {pq.mq.topic}:{pq.mq.broker_name}:{pq.mq.queue_id}"
        pq.tasks.append(self._tasks.spawn(self._puller.run(pq), name=f"pull {name}"))
        loop = self._consumption.queue_loop(pq)
        if loop is not None:
            pq.tasks.append(self._tasks.spawn(loop, name=f"consume {name}"))

    def _pulled(self, pq: ProcessQueue, fresh: list[MessageExt]) -> None:
        self._track(pq)
        self._consumption.pulled(pq, fresh)

    def _track(self, pq: ProcessQueue) -> None:
        """Note the queue's offset to commit (persisted by the offset store's next round)."""
        offset = pq.commit_offset()
        if offset is not None and not pq.dropped:
            self.offsets.update(pq.mq, offset)

    async def _reset(self, offsets: dict[MessageQueue, int]) -> None:
        if not self._stop.is_set():
            await self._rebalancer.reset(offsets)

    async def _addr(self, mq: MessageQueue) -> str:
        return await master_addr(self.instance, mq)

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
