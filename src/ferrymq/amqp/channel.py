"""One open AMQP channel: its methods mapped onto the metadata service (exchanges, queues, bindings)
and the messaging core (publish, consume, get, acknowledgements), with RabbitMQ's replies and errors.
Deliveries wait in `unacked` under their delivery tags until acknowledged, rejected or returned when
the channel closes."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from pamqp import base, commands

from ferrymq.amqp.access import Kind, Operation, Permits
from ferrymq.amqp.direct_reply import REPLY_TO
from ferrymq.amqp.feeds import UNLIMITED, Consumer
from ferrymq.amqp.publisher import Publisher
from ferrymq.messaging.api import MessagingError
from ferrymq.meta.entities import Binding, Exchange, Queue
from ferrymq.meta.errors import MetaError
from ferrymq.protocol.amqp import fast
from ferrymq.protocol.amqp.errors import AMQPError, ChannelException, ConnectionException, ReplyCode
from ferrymq.protocol.amqp.events import ContentReceived
from ferrymq.protocol.amqp.mapping import from_rocketmq
from ferrymq.protocol.amqp.methods import encode_method, ids_of
from ferrymq.protocol.message_ext import MessageExt
from ferrymq.protocol.pop import POP_CK

if TYPE_CHECKING:
    from ferrymq.amqp.flow import PublisherThrottle
    from ferrymq.amqp.gateway import Gateway
    from ferrymq.amqp.session import Session


GET_WAIT_MS = 500  # the longest basic.get waits for a message stored here to become visible


class Unacked:
    __slots__ = ("consumer", "delivered", "handle", "message", "queue")

    def __init__(self, queue: Queue, message: MessageExt, handle: str, consumer: Consumer | None) -> None:
        self.delivered = time.monotonic()
        self.queue = queue
        self.message = message  # kept for dead-lettering it
        self.handle = handle
        self.consumer = consumer  # None for basic.get


class Channel:
    def __init__(self, session: Session, number: int) -> None:
        self.session = session
        self.gateway: Gateway = session.gateway
        self.number = number
        self.vhost = session.connection.vhost
        self.publisher = Publisher(self.gateway, self.vhost, self)
        self.consumers: dict[str, Consumer] = {}
        self.unacked: dict[int, Unacked] = {}
        self.next_tag = 1
        self.prefetch = 0  # for consumers started from now on (basic.qos global=false)
        self.channel_prefetch = 0  # for the whole channel (global=true)
        self.last_queue = ""  # what an empty queue name means (AMQP's "current queue")
        self._handing_back: list[asyncio.Task] = []  # requeues and dead-letterings under way
        self._deleting: set[str] = set()  # queues this channel is deleting
        self._after_answer: list[bytes] = []  # frames due after the current method's answer
        self.reply_token: str | None = None  # of its direct reply-to consumer, and that one's tag
        self.reply_tag = ""
        self.tx: tuple[list[ContentReceived], list[Any]] | None = None  # publishes, acknowledgements
        self.gateway.channels.add(self)
        self.closing = False  # channel.close sent to the client: nothing more goes out on it
        self.closed = False
        self._handlers: dict[type, Callable[[Any], Awaitable[base.Frame | None]]] = {
            commands.Exchange.Declare: self._exchange_declare,
            commands.Exchange.Delete: self._exchange_delete,
            commands.Exchange.Bind: self._exchange_bind,
            commands.Exchange.Unbind: self._exchange_unbind,
            commands.Queue.Declare: self._queue_declare,
            commands.Queue.Bind: self._queue_bind,
            commands.Queue.Unbind: self._queue_unbind,
            commands.Queue.Purge: self._queue_purge,
            commands.Queue.Delete: self._queue_delete,
            commands.Basic.Qos: self._qos,
            commands.Basic.Consume: self._consume,
            commands.Basic.Cancel: self._cancel,
            commands.Basic.Get: self._get,
            commands.Basic.Recover: self._recover,
            commands.Basic.RecoverAsync: self._recover,
            commands.Confirm.Select: self._confirm_select,
            commands.Tx.Select: self._tx_select,
            commands.Tx.Commit: self._tx_commit,
            commands.Tx.Rollback: self._tx_rollback,
        }

    # --- what the publisher and the feeds call ------------------------------------------------

    @property
    def frame_max(self) -> int:
        return self.session.connection.frame_max

    @property
    def access(self) -> Permits:
        return self.session.access

    def send(self, data: bytes) -> None:
        if data and not (self.closed or self.closing):
            self.session.send(data)

    def fail(self, error: AMQPError) -> None:
        self.session.fail(self.number, error)

    @property
    def throttle(self) -> PublisherThrottle:
        return self.session.throttle

    def credit(self) -> int:
        if self.closed or self.closing:
            return 0
        if self.channel_prefetch:
            return self.channel_prefetch - len(self.unacked)
        return UNLIMITED

    def deliver(self, consumer: Consumer, message: MessageExt, handle: str) -> None:
        tag = self.next_tag
        self.next_tag += 1
        self.gateway.counts.delivered += 1
        if not consumer.no_ack:
            consumer.in_flight += 1
            self.unacked[tag] = Unacked(consumer.feed.queue, message, handle, consumer)
        exchange, routing_key, properties = from_rocketmq(message.properties, message.born_timestamp)
        self.send(
            fast.encode_delivery(
                self.number,
                consumer.tag,
                tag,
                message.reconsume_times > 0,
                exchange,
                routing_key,
                properties,
                message.body,
                self.frame_max,
            )
        )

    def overdue(self, timeout_s: float, now: float) -> bool:
        """Whether its oldest unacknowledged delivery is older than the consumer timeout."""
        oldest = next(iter(self.unacked.values()), None)
        return oldest is not None and now - oldest.delivered > timeout_s

    def deliver_reply(
        self, consumer_tag: str, exchange: str, routing_key: str, properties: bytes, body: bytes
    ) -> None:
        """A direct reply-to reply (no-ack: not tracked)."""
        tag = self.next_tag
        self.next_tag += 1
        self.gateway.counts.delivered += 1
        self.send(
            fast.encode_delivery(
                self.number, consumer_tag, tag, False, exchange, routing_key, properties, body, self.frame_max
            )
        )

    def rules_changed(self) -> None:
        """The cluster's users or rules changed: a consumer whose user may no longer read its queue
        is cancelled, as when the queue is deleted (what it holds unacknowledged stays its to
        settle), and an auto-delete queue goes with its last consumer, as after a basic.cancel."""
        revoked = [c for c in self.consumers.values() if self.access.read_refusal(c.feed.queue.name)]
        for consumer in revoked:
            self.cancelled_by_broker(consumer)
            self.gateway.expiry.touch(consumer.feed.queue)
        if revoked:
            self.gateway.tasks.spawn(
                self._auto_delete(revoked), f"auto-delete after channel {self.number}'s revocation"
            )

    def cancelled_by_broker(self, consumer: Consumer) -> None:
        """The consumer's queue is gone, or its user may no longer read it: basic.cancel to a client
        that understands it."""
        if self.consumers.pop(consumer.tag, None) is None:
            return
        consumer.feed.remove(consumer)
        if self.session.connection.client_properties.get("capabilities", {}).get("consumer_cancel_notify"):
            cancel = encode_method(self.number, commands.Basic.Cancel(consumer.tag, nowait=True))
            if consumer.feed.queue.name in self._deleting:  # after this channel's delete-ok, as RabbitMQ
                self._after_answer.append(cancel)
            else:
                self.send(cancel)

    # --- what the session calls ----------------------------------------------------------------

    def publish(self, event: ContentReceived) -> None:
        if self.tx is not None:
            self.tx[0].append(event)
        else:
            self.publisher.add(event)

    def flush(self) -> None:
        self.publisher.flush()

    def acknowledge(self, ack: fast.Ack | fast.Nack | fast.Reject) -> None:
        if self.tx is not None:  # settled at commit; unknown tags fail now, as in RabbitMQ
            self._tags(ack)
            self.tx[1].append(ack)
            return
        self._settle(ack, self._taken(ack))

    async def handle(self, method: base.Frame) -> None:
        """A synchronous method: act, then answer (unless nowait)."""
        handler = self._handlers.get(type(method))
        if handler is None:
            raise ChannelException(
                ReplyCode.NOT_IMPLEMENTED, f"{method.name.lower()} is not implemented", *ids_of(method)
            )
        await self._settled()
        try:
            answer = await handler(method)
        except MetaError as e:
            kind = ConnectionException if e.code == ReplyCode.COMMAND_INVALID else ChannelException
            raise kind(ReplyCode(e.code), e.text, *ids_of(method)) from None
        if answer is not None and not getattr(method, "nowait", False):
            self.send(encode_method(self.number, answer))
        if self._after_answer:
            self.send(b"".join(self._after_answer))
            self._after_answer.clear()

    async def _settled(self) -> None:
        """Every publish, requeue and dead-lettering the client sent so far is done (as in RabbitMQ,
        which handles a channel's frames in order): a method sees them."""
        await self.publisher.settled()
        handing_back, self._handing_back = self._handing_back, []
        if handing_back:
            await asyncio.gather(*handing_back, return_exceptions=True)

    async def close(self) -> None:
        """The channel ended: what it published or handed back before its close is done, its
        consumers stop and every unacknowledged delivery goes back."""
        if self.closed:
            return
        await self._settled()
        self.closed = True
        self.gateway.channels.discard(self)
        self._stop_replies()
        for consumer in self.consumers.values():
            await consumer.feed.leave(consumer)
        await self._auto_delete(list(self.consumers.values()))
        self.consumers.clear()
        unacked, self.unacked = list(self.unacked.values()), {}
        await self._requeue(unacked)

    # --- exchanges ------------------------------------------------------------------------------

    def _may(self, operation: Operation, kind: Kind, name: str, method: base.Frame) -> None:
        self.session.access.check(operation, kind, name, *ids_of(method))

    async def _exchange_declare(self, m: commands.Exchange.Declare) -> base.Frame:
        if not m.passive:
            self._may("configure", "exchange", m.exchange, m)
        exchange = Exchange(
            vhost=self.vhost, name=m.exchange, type=m.exchange_type, durable=m.durable,
            auto_delete=m.auto_delete, internal=m.internal, arguments=dict(m.arguments or {}),
        )  # fmt: skip
        await self.gateway.metadata.declare_exchange(exchange, m.passive)
        await self.gateway.catalog.refresh(self.vhost)
        return commands.Exchange.DeclareOk()

    async def _exchange_delete(self, m: commands.Exchange.Delete) -> base.Frame:
        self._may("configure", "exchange", m.exchange, m)
        await self.gateway.metadata.delete_exchange(self.vhost, m.exchange, m.if_unused)
        await self.gateway.catalog.refresh(self.vhost)
        return commands.Exchange.DeleteOk()

    def _e2e(self, m: commands.Exchange.Bind | commands.Exchange.Unbind) -> Binding:
        return Binding(
            vhost=self.vhost, source=m.source, destination=m.destination, destination_type="exchange",
            routing_key=m.routing_key, arguments=dict(m.arguments or {}),
        )  # fmt: skip

    async def _exchange_bind(self, m: commands.Exchange.Bind) -> base.Frame:
        self._may("write", "exchange", m.destination, m)
        self._may("read", "exchange", m.source, m)
        await self.gateway.metadata.bind(self._e2e(m))
        await self.gateway.catalog.refresh(self.vhost)
        return commands.Exchange.BindOk()

    async def _exchange_unbind(self, m: commands.Exchange.Unbind) -> base.Frame:
        self._may("write", "exchange", m.destination, m)
        self._may("read", "exchange", m.source, m)
        await self.gateway.metadata.unbind(self._e2e(m))
        await self.gateway.catalog.refresh(self.vhost)
        return commands.Exchange.UnbindOk()

    # --- queues ---------------------------------------------------------------------------------

    def _queue_name(self, name: str, method: base.Frame) -> str:
        name = name or self.last_queue
        if not name:
            raise ChannelException(ReplyCode.NOT_FOUND, "no previously declared queue", *ids_of(method))
        return name

    async def _queue_declare(self, m: commands.Queue.Declare) -> base.Frame:
        gateway, owner = self.gateway, self.session.owner
        name = m.queue
        known = (await gateway.catalog.get(self.vhost)).queue(name) if name else None
        queue = Queue(
            vhost=self.vhost, name=name, durable=m.durable, auto_delete=m.auto_delete,
            exclusive_owner=owner if m.exclusive else None, arguments=dict(m.arguments or {}),
        )  # fmt: skip
        if m.passive:  # only whether it exists and this connection may use it
            queue = Queue(vhost=self.vhost, name=self._queue_name(name, m), exclusive_owner=owner)
        elif name:
            self._may("configure", "queue", name, m)
        declared = await gateway.metadata.declare_queue(queue, m.passive)
        await gateway.ensure_topic(declared, known=known is not None and known.topic == declared.topic)
        if declared.exclusive_owner is not None:
            self.session.owned.add(declared.name)
        await gateway.catalog.refresh(self.vhost)
        self.last_queue = declared.name
        gateway.expiry.touch(declared)  # a declaration, passive too, renews an x-expires lease
        ready = await gateway.ready_count(declared)
        return commands.Queue.DeclareOk(declared.name, ready, gateway.feeds.consumer_count(declared))

    async def _find_queue(self, name: str) -> Queue | None:
        """The vhost's queue `name`; on a miss the metadata service is asked before saying it is
        absent, since another gateway may have declared it a moment ago and its change not reached
        this gateway's watch yet (RabbitMQ's declare-ok means every node knows the queue)."""
        queue = (await self.gateway.catalog.get(self.vhost)).queue(name)
        if queue is None:
            queue = (await self.gateway.catalog.refresh(self.vhost)).queue(name)
        return queue

    async def _queue(self, name: str, method: base.Frame) -> Queue:
        """The queue `name` (or the current one) of this vhost, usable by this connection."""
        name = self._queue_name(name, method)
        queue = await self._find_queue(name)
        if queue is None:
            raise ChannelException(
                ReplyCode.NOT_FOUND, f"no queue '{name}' in vhost '{self.vhost}'", *ids_of(method)
            )
        if queue.exclusive_owner not in (None, self.session.owner):
            raise ChannelException(
                ReplyCode.RESOURCE_LOCKED,
                f"cannot obtain exclusive access to locked queue '{name}' in vhost '{self.vhost}'. It "
                "could be originally declared on another connection or the exclusive property value "
                "does not match that of the original declaration.",
                *ids_of(method),
            )
        return queue

    def _queue_binding(self, m: commands.Queue.Bind | commands.Queue.Unbind, queue: str) -> Binding:
        return Binding(
            vhost=self.vhost, source=m.exchange, destination=queue, destination_type="queue",
            routing_key=m.routing_key, arguments=dict(m.arguments or {}),
        )  # fmt: skip

    async def _queue_bind(self, m: commands.Queue.Bind) -> base.Frame:
        name = self._queue_name(m.queue, m)
        self._may("write", "queue", name, m)
        self._may("read", "exchange", m.exchange, m)
        routing_key = m.routing_key if (m.queue or m.routing_key) else name
        binding = self._queue_binding(m, name)
        if routing_key != m.routing_key:
            binding = Binding(
                vhost=binding.vhost, source=binding.source, destination=name, routing_key=routing_key,
                arguments=binding.arguments,
            )  # fmt: skip
        await self.gateway.metadata.bind(binding, self.session.owner)
        await self.gateway.catalog.refresh(self.vhost)
        return commands.Queue.BindOk()

    async def _queue_unbind(self, m: commands.Queue.Unbind) -> base.Frame:
        self._may("write", "queue", self._queue_name(m.queue, m), m)
        self._may("read", "exchange", m.exchange, m)
        await self.gateway.metadata.unbind(
            self._queue_binding(m, self._queue_name(m.queue, m)), self.session.owner
        )
        await self.gateway.catalog.refresh(self.vhost)
        return commands.Queue.UnbindOk()

    async def _queue_purge(self, m: commands.Queue.Purge) -> base.Frame:
        queue = await self._queue(m.queue, m)
        self._may("read", "queue", queue.name, m)
        return commands.Queue.PurgeOk(await self.gateway.purge(queue))

    async def _queue_delete(self, m: commands.Queue.Delete) -> base.Frame:
        gateway = self.gateway
        name = self._queue_name(m.queue, m)
        if await self._find_queue(name) is None:
            return commands.Queue.DeleteOk(0)  # RabbitMQ 3.10: deleting an absent queue is no error
        queue = await self._queue(name, m)
        self._may("configure", "queue", name, m)
        where = f"queue '{name}' in vhost '{self.vhost}'"
        if m.if_unused and gateway.feeds.consumer_count(queue):
            raise ChannelException(ReplyCode.PRECONDITION_FAILED, f"{where} in use", *ids_of(m))
        ready = await gateway.ready_count(queue)
        if m.if_empty and ready:
            raise ChannelException(ReplyCode.PRECONDITION_FAILED, f"{where} is not empty", *ids_of(m))
        self._deleting.add(name)
        try:
            await gateway.delete_queue(queue, self.session.owner)
        finally:
            self._deleting.discard(name)
        self.session.owned.discard(name)
        return commands.Queue.DeleteOk(ready)

    # --- consuming --------------------------------------------------------------------------------

    async def _qos(self, m: commands.Basic.Qos) -> base.Frame:
        if m.prefetch_size:
            raise ConnectionException(
                ReplyCode.NOT_IMPLEMENTED, f"prefetch_size!=0 ({m.prefetch_size})", *ids_of(m)
            )
        if m.global_:
            self.channel_prefetch = m.prefetch_count
            for consumer in self.consumers.values():
                consumer.feed.wake()
        else:
            self.prefetch = m.prefetch_count
        return commands.Basic.QosOk()

    async def _consume(self, m: commands.Basic.Consume) -> base.Frame | None:
        tag = m.consumer_tag or f"amq.ctag-{secrets.token_urlsafe(16)}"
        if tag in self.consumers or tag == self.reply_tag:
            raise ConnectionException(
                ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'", *ids_of(m)
            )
        if m.queue == REPLY_TO:
            return await self._consume_replies(m, tag)
        queue = await self._queue(m.queue, m)
        self._may("read", "queue", queue.name, m)
        if self.gateway.settings.of(await self.gateway.catalog.get(self.vhost), queue).broadcast:
            queue = await self.gateway.broadcast_view(queue, f"{self.session.owner}/{self.number}/{tag}")
        feed = self.gateway.feeds.feed(queue)
        if (m.exclusive and feed.consumers) or any(c.exclusive for c in feed.consumers):
            raise ChannelException(
                ReplyCode.ACCESS_REFUSED,
                f"queue '{queue.name}' in vhost '{self.vhost}' in exclusive use",
                *ids_of(m),
            )
        consumer = Consumer(self, tag, feed, m.no_ack, m.exclusive, self.prefetch, self.access.user)
        self.consumers[tag] = consumer
        if not m.nowait:  # consume-ok goes before the first delivery
            self.send(encode_method(self.number, commands.Basic.ConsumeOk(tag)))
        feed.add(consumer)
        return None

    async def _consume_replies(self, m: commands.Basic.Consume, tag: str) -> base.Frame:
        if not m.no_ack:
            raise ChannelException(
                ReplyCode.PRECONDITION_FAILED, "reply consumer cannot acknowledge", *ids_of(m)
            )
        if self.reply_token is not None:
            raise ChannelException(ReplyCode.PRECONDITION_FAILED, "reply consumer already set", *ids_of(m))
        self.reply_token, self.reply_tag = await self.gateway.replies.register(self, tag), tag
        return commands.Basic.ConsumeOk(tag)

    def _stop_replies(self) -> None:
        if self.reply_token is not None:
            self.gateway.replies.unregister(self.reply_token)
            self.reply_token, self.reply_tag = None, ""

    async def _cancel(self, m: commands.Basic.Cancel) -> base.Frame:
        if m.consumer_tag and m.consumer_tag == self.reply_tag:
            self._stop_replies()
        consumer = self.consumers.pop(m.consumer_tag or "", None)
        if consumer is not None:
            await consumer.feed.leave(consumer)
            self.gateway.expiry.touch(consumer.feed.queue)
            await self._auto_delete([consumer])
        return commands.Basic.CancelOk(m.consumer_tag)

    async def _auto_delete(self, cancelled: Iterable[Consumer]) -> None:
        """An auto-delete queue goes when its last consumer does (on this gateway)."""
        for consumer in cancelled:
            queue = consumer.feed.queue
            if queue.auto_delete and not self.gateway.feeds.consumer_count(queue):
                # (deleted meanwhile, or the metadata service is away: not the client's error)
                with contextlib.suppress(MetaError, MessagingError):
                    await self.gateway.delete_queue(queue, self.session.owner)

    async def _get(self, m: commands.Basic.Get) -> base.Frame | None:
        queue = await self._queue(m.queue, m)
        self._may("read", "queue", queue.name, m)
        gateway = self.gateway
        gateway.expiry.touch(queue)
        # a message this gateway just stored may not be dispatched yet: wait for it briefly
        found = await gateway.feeds.pop(queue, 1, GET_WAIT_MS if await gateway.undispatched(queue) else 0)
        if not found and await gateway.feeds.handed_back(queue, GET_WAIT_MS / 1000):
            found = await gateway.feeds.pop(queue, 1, 0)
        if not found:
            return commands.Basic.GetEmpty()
        message = found[0]
        handle = message.properties[POP_CK]
        if m.no_ack:
            gateway.feeds.settle(queue, [handle])
        tag = self.next_tag
        self.next_tag += 1
        gateway.counts.delivered += 1
        if not m.no_ack:
            self.unacked[tag] = Unacked(queue, message, handle, None)
        exchange, routing_key, properties = from_rocketmq(message.properties, message.born_timestamp)
        ready = await gateway.ready_count(queue)
        get_ok = commands.Basic.GetOk(tag, message.reconsume_times > 0, exchange, routing_key, ready)
        self.send(
            encode_method(self.number, get_ok)
            + fast.encode_content(self.number, properties, message.body, self.frame_max)
        )
        return None

    # --- acknowledgements -----------------------------------------------------------------------

    def _taken(self, ack: fast.Ack | fast.Nack | fast.Reject) -> list[Unacked]:
        """The deliveries an acknowledgement names, taken out of `unacked`."""
        taken = [self.unacked.pop(t) for t in self._tags(ack)]
        for delivery in taken:
            if delivery.consumer is not None:
                delivery.consumer.settled()
        return taken

    def _tags(self, ack: fast.Ack | fast.Nack | fast.Reject) -> list[int]:
        """The delivery tags an acknowledgement names (multiple with tag 0: all of them)."""
        tag, unacked = ack.delivery_tag, self.unacked
        multiple = not isinstance(ack, fast.Reject) and ack.multiple
        if multiple:
            tags = [t for t in unacked if t <= tag] if tag else list(unacked)
        elif tag in unacked:
            tags = [tag]
        else:
            tags = []
        if not tags and not (multiple and tag == 0):
            method = fast.ACK_METHODS[type(ack)]
            raise ChannelException(
                ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {tag}", fast.BASIC, method
            )
        return tags

    def _settle(self, ack: fast.Ack | fast.Nack | fast.Reject, taken: list[Unacked]) -> None:
        if not taken:
            return
        if isinstance(ack, fast.Ack):
            self.gateway.counts.acknowledged += len(taken)
            self._ack(taken)
        elif ack.requeue:
            self._handing_back.append(self.gateway.tasks.spawn(self._give_back(taken), "requeue"))
        else:
            self._handing_back.append(self.gateway.tasks.spawn(self._reject(taken), "dead-letter"))

    def _ack(self, taken: list[Unacked], success: bool = True) -> None:
        self._trace(taken, success)
        by_queue: dict[str, tuple[Queue, list[str]]] = {}
        for delivery in taken:
            by_queue.setdefault(delivery.queue.topic, (delivery.queue, []))[1].append(delivery.handle)
        for queue, handles in by_queue.values():
            self.gateway.feeds.settle(queue, handles)

    def _trace(self, taken: list[Unacked], success: bool) -> None:
        settings_of, topology = self.gateway.settings.of, self.gateway.catalog.known(self.vhost)
        if topology is None:
            return
        for delivery in taken:
            if settings_of(topology, delivery.queue).message_trace:
                self.gateway.tracer.settled(delivery.queue, delivery.message, delivery.delivered, success)

    async def _give_back(self, taken: list[Unacked]) -> None:
        """Requeued by the client: at once, or after a delay on a queue with graded retry."""
        gateway, now = self.gateway, []
        topology = await gateway.catalog.get(self.vhost)
        for delivery in taken:
            settings = gateway.settings.of(topology, delivery.queue)
            if settings.graded_retry:
                await gateway.retries.give_back(delivery.queue, settings, delivery.message, delivery.handle)
            else:
                now.append(delivery)
        await self._requeue(now)

    async def _reject(self, taken: list[Unacked]) -> None:
        """Rejected without requeue: to the queue's dead-letter exchange if it has one, then settled."""
        for delivery in taken:
            await self.gateway.dead_letters.send(delivery.queue, delivery.message, "rejected")
        self._ack(taken, success=False)

    async def _requeue(self, deliveries: list[Unacked]) -> None:
        by_queue: dict[str, tuple[Queue, list[str]]] = {}
        for delivery in deliveries:
            by_queue.setdefault(delivery.queue.topic, (delivery.queue, []))[1].append(delivery.handle)
        await asyncio.gather(*(self.gateway.feeds.requeue(q, handles) for q, handles in by_queue.values()))

    async def _recover(self, m: commands.Basic.Recover | commands.Basic.RecoverAsync) -> base.Frame | None:
        """Redeliver every unacknowledged message (RabbitMQ requeues them whatever `requeue` says)."""
        unacked, self.unacked = list(self.unacked.values()), {}
        for delivery in unacked:
            if delivery.consumer is not None:
                delivery.consumer.settled()
        await self._requeue(unacked)
        return commands.Basic.RecoverOk() if isinstance(m, commands.Basic.Recover) else None

    # --- transactions -----------------------------------------------------------------------------

    async def _confirm_select(self, m: commands.Confirm.Select) -> base.Frame:
        return commands.Confirm.SelectOk()  # (the connection numbers the publishes from here on)

    async def _tx_select(self, m: commands.Tx.Select) -> base.Frame:
        if self.tx is None:
            self.tx = ([], [])
        return commands.Tx.SelectOk()

    def _in_tx(self, method: base.Frame) -> tuple[list[ContentReceived], list[Any]]:
        if self.tx is None:
            raise ChannelException(
                ReplyCode.PRECONDITION_FAILED, "channel is not transactional", *ids_of(method)
            )
        return self.tx

    async def _tx_commit(self, m: commands.Tx.Commit) -> base.Frame:
        publishes, acks = self._in_tx(m)
        self.tx = ([], [])
        await self.publisher.store(publishes)
        for ack in acks:
            self._settle(ack, self._taken(ack))
        return commands.Tx.CommitOk()

    async def _tx_rollback(self, m: commands.Tx.Rollback) -> base.Frame:
        self._in_tx(m)
        self.tx = ([], [])
        return commands.Tx.RollbackOk()
