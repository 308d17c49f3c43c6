"""Producer: send messages to a topic's queues, with retries on another broker and auto-batching.

Like RocketMQ's DefaultMQProducer: queues are chosen round-robin (or by a sharding key for order),
a failed send is retried on another broker (`retry_times_when_send_failed`, default 2) after the
route is fetched again, and a broker that fails is avoided for a back-off period. A broker's flow
control (SYSTEM_BUSY: a quota, a full queue) is no failure: the send waits with growing back-off and
goes again to the same broker, for up to `flow_control_timeout` seconds. Bodies of 4 KiB
or more are compressed, with zlib unless `compression` says lz4 or zstd (RocketMQ 5's compressType;
consumers older than RocketMQ 5 read zlib only). With `auto_batch`, concurrent sends are gathered into
SEND_BATCH_MESSAGE requests (up to `max_batch_bytes`, waiting at most `linger_ms`), as Kafka
producers do. With `standby_namesrv_addr`, a message the primary cluster cannot take goes to a standby
cluster instead (see `ferrymq.client.standby`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Self

from ferrymq.client.aio import finish
from ferrymq.client.faults import BrokerAvoidance
from ferrymq.client.hooks import Hooks, SendHook, hooked_send
from ferrymq.client.instance import ClientError, ClientInstance, TLSOption, TopicRoute
from ferrymq.client.message import RETRY_PREFIX, Message, MessageQueue, SendResult, SendStatus
from ferrymq.client.standby import Degradation, standby_topic
from ferrymq.client.trace import TraceDispatcher
from ferrymq.client.uniq_key import UniqKeyGenerator
from ferrymq.net import RemotingError
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.protocol.batch import encode_batch
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.compression import Compression, compress
from ferrymq.protocol.hashes import java_hash
from ferrymq.protocol.properties import MAX_PROPERTIES_SIZE, Prop, encode_properties, find_property
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.protocol.topic_names import AUTO_CREATE_TOPIC

log = logging.getLogger(__name__)

_STATUS: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
# Answers after which another broker may well succeed (RocketMQ's retryResponseCodes).
_RETRY_CODES = {
    ResponseCode.TOPIC_NOT_EXIST,
    ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.SYSTEM_ERROR,
    ResponseCode.SYSTEM_BUSY,
    ResponseCode.NO_PERMISSION,
}


_BARE_PROPS_SIZE = len("UNIQ_KEY\x01\x02") + 32  # the properties of a message with none of its own
_MAX_HEADER_TEMPLATES = 4096


class SendError(ClientError):
    """A send that failed for good; `code` is the broker's response code when it answered;
    `unavailable`: no broker of the cluster could take it (none writable, or every attempt failed)."""

    def __init__(self, message: str, code: int | None = None, *, unavailable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.unavailable = unavailable


def _cluster_cannot_take(error: Exception) -> bool:
    """The cluster failed, not the message: no route, no broker reachable or willing (see SendError)."""
    return not isinstance(error, SendError) or error.unavailable


def _find(props: str, key: str) -> str | None:
    found = find_property(props.encode(), f"{key}\x01".encode())
    return found.decode() if found is not None else None


QueueSelector = Callable[[Sequence[MessageQueue], Message, object], MessageQueue]


def hash_selector(queues: Sequence[MessageQueue], message: Message, key: object) -> MessageQueue:
    """Same sharding key, same queue (while the queue count stays the same): per-key order."""
    return queues[abs(java_hash(str(key))) % len(queues)]


class Producer:
    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        send_timeout: float = 3.0,
        retry_times_when_send_failed: int = 2,
        compress_msg_body_over_howmuch: int = 4096,
        compress_level: int = 5,
        compression: str = "zlib",
        max_message_size: int = 4 * 1024 * 1024,
        auto_batch: bool = False,
        linger_ms: float = 5.0,
        max_batch_bytes: int = 256 * 1024,
        instance: ClientInstance | None = None,
        tls: TLSOption = False,
        access_key: str | None = None,
        secret_key: str | None = None,
        enable_trace: bool = False,
        trace_topic: str | None = None,
        flow_control_timeout: float = 30.0,
        standby_namesrv_addr: str | None = None,
        standby_topic: str = standby_topic("DefaultCluster"),
        standby_after: float = 0.5,
    ) -> None:
        """`standby_namesrv_addr`: the NameServers of a standby cluster, where messages go (to
        `standby_topic`) while the primary cannot take them, or does not answer within `standby_after` s."""
        self.group = group
        self.flow_control_timeout = flow_control_timeout
        self.flow_controlled = 0  # answers of flow control, each waited for and sent again
        self.instance = instance or ClientInstance(
            namesrv_addr, tls=tls, access_key=access_key, secret_key=secret_key
        )
        self._own_instance = instance is None
        self.send_timeout = send_timeout
        self.retries = retry_times_when_send_failed
        self.failed_attempts = 0  # sends to a broker that failed or timed out, retried or not
        self.compress_over = compress_msg_body_over_howmuch
        self.compress_level = compress_level  # zlib's 0-9 or zstd's 1-22 (LZ4 takes none); RocketMQ's is 5
        self.compression = Compression.named(compression)
        self.max_message_size = max_message_size
        self.avoidance = BrokerAvoidance()
        self._uniq = UniqKeyGenerator()
        self._round_robin = 0
        self._headers: dict[MessageQueue, dict[str, str]] = {}  # each queue's SEND_MESSAGE_V2 header
        self._tasks = BackgroundTasks(f"producer {group}")
        self._async_sends: set[asyncio.Task] = set()  # send_async's in flight, let finish at shutdown
        self._batcher = _Batcher(self, self._tasks, linger_ms / 1000, max_batch_bytes) if auto_batch else None
        self._started = False
        self.hooks = Hooks()
        self.trace = (
            self.hooks.add(TraceDispatcher(self.instance, group, trace_topic)) if enable_trace else None
        )
        self.degradation = None
        if standby_namesrv_addr:
            on_standby = Producer(
                group, standby_namesrv_addr, send_timeout=send_timeout, tls=tls, access_key=access_key,
                secret_key=secret_key, compression=compression, max_message_size=max_message_size,
            )  # fmt: skip
            self.degradation = Degradation(
                on_standby, standby_topic, standby_after, self._uniq, _cluster_cannot_take
            )

    @property
    def send_hooks(self) -> list[SendHook]:
        return self.hooks.send

    async def start(self) -> None:
        self.instance.producer_groups.add(self.group)
        if self._own_instance:
            await self.instance.start()
        self._started = True
        if self.degradation is not None:
            await self.degradation.start()
        await self.hooks.start()

    async def shutdown(self) -> None:
        """Send what is batched and let `send_async` sends finish (for as long as one send may take,
        retries included; a callback learns when its send was cut short), then stop the extensions
        and leave."""
        if self._batcher is not None:
            await self._batcher.flush_all()
        await finish(self._async_sends, self.send_timeout * (1 + self.retries))
        await self._tasks.close()
        await self.hooks.stop()
        if self.degradation is not None:
            await self.degradation.shutdown()
        self.instance.producer_groups.discard(self.group)
        if self._own_instance:
            await self.instance.close()
        self._started = False

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.shutdown()

    # --- sending -------------------------------------------------------------------------------

    async def send(
        self, message: Message, *, selector: QueueSelector | None = None, arg: object = None
    ) -> SendResult:
        """Send and wait for the broker's answer. With `selector`, `arg` picks the queue (order)."""
        if self._batcher is not None and selector is None and not message.scheduled:
            return await self._batcher.add(message)
        if self.hooks.send:
            return await hooked_send(self.hooks.send, [message], self._send_one(message, selector, arg))
        if self.degradation is None:  # the usual case: two coroutines fewer than through _send_here
            body, props, sys_flag, uniq = self._prepare(message)
            return await self._send(
                message.topic, body, props, message.flag, sys_flag, False, selector, message, arg, uniq
            )
        return await self._send_one(message, selector, arg)

    async def _send_one(self, message: Message, selector: QueueSelector | None, arg: object) -> SendResult:
        if self.degradation is not None and selector is None:  # an ordered send never leaves its queue
            return await self.degradation.send([message], False, lambda m: self._send_here(m[0]))
        return await self._send_here(message, selector, arg)

    async def _send_here(
        self, message: Message, selector: QueueSelector | None = None, arg: object = None
    ) -> SendResult:
        body, props, sys_flag, uniq = self._prepare(message)
        return await self._send(
            message.topic, body, props, message.flag, sys_flag, False, selector, message, arg, uniq
        )

    async def send_orderly(self, message: Message, sharding_key: object) -> SendResult:
        """Messages with the same sharding key go to the same queue, in order (partitioned order:
        an orderly PushConsumer then sees each key's messages in the order they were sent). For
        global order give the topic a single queue (`ferrymq admin create-topic T --queues 1`): all
        its messages are then one sequence, consumed by one member of the group at a time."""
        return await self.send(message, selector=hash_selector, arg=sharding_key)

    def send_async(
        self, message: Message, callback: Callable[[SendResult | None, Exception | None], None]
    ) -> None:
        """Fire and forget: `callback(result, None)` or `callback(None, error)` when it is done."""
        task = self._tasks.spawn(self._send_and_call_back(message, callback), name=f"send_async {self.group}")
        self._async_sends.add(task)
        task.add_done_callback(self._async_sends.discard)

    async def _send_and_call_back(
        self, message: Message, callback: Callable[[SendResult | None, Exception | None], None]
    ) -> None:
        try:
            result = await self.send(message)
        except asyncio.CancelledError:
            callback(None, SendError("the producer shut down before the send finished"))
            raise
        except Exception as e:
            callback(None, e)
        else:
            callback(result, None)  # a callback that raises is logged by the producer's task group

    async def send_oneway(self, message: Message) -> None:
        """Send without waiting for any answer (no delivery guarantee)."""
        body, props, sys_flag, _ = self._prepare(message)
        route = await self._route(message.topic)
        mq = self._pick(route.write_queues, None)
        request = self._request(mq, body, props, message.flag, sys_flag, False)
        await self.instance.remoting.invoke_oneway(route.masters[mq.broker_name], request)

    async def send_batch(self, messages: Sequence[Message]) -> SendResult:
        """Send messages of one topic as one SEND_BATCH_MESSAGE; they land in one queue, in order."""
        if self.hooks.send:
            return await hooked_send(self.hooks.send, messages, self._send_batch(messages))
        return await self._send_batch(messages)

    async def _send_batch(self, messages: Sequence[Message]) -> SendResult:
        if self.degradation is not None:
            return await self.degradation.send(messages, True, self._send_batch_here)
        return await self._send_batch_here(messages)

    async def _send_batch_here(self, messages: Sequence[Message]) -> SendResult:
        if not messages:
            raise SendError("the batch is empty")
        topic = messages[0].topic
        if any(m.topic != topic for m in messages):
            raise SendError("every message of a batch must have the same topic")
        entries = []
        uniq_keys = self._uniq.next_many(len(messages))
        for i, m in enumerate(messages):
            if m.scheduled:
                raise SendError("delayed and timed messages cannot be sent in a batch")
            if m.bare:  # the usual case: the new id is the only property
                encoded = f"UNIQ_KEY\x01{uniq_keys[i]}\x02".encode()
            else:
                props = m.system_properties()
                own = props.get(Prop.UNIQ_KEY)
                if own is None:  # the new id goes last, as setdefault would put it
                    encoded = f"{encode_properties(props)}UNIQ_KEY\x01{uniq_keys[i]}\x02".encode()
                else:
                    uniq_keys[i] = own
                    encoded = encode_properties(props).encode()
            self._check(m, len(encoded))
            entries.append((m.body, encoded, m.flag))
        return await self._send(
            topic, encode_batch(entries), "", 0, 0, True, None, messages[0], None, ",".join(uniq_keys)
        )

    # --- internals -----------------------------------------------------------------------------

    def _prepare(self, message: Message) -> tuple[bytes, str, int, str]:
        """Body (compressed if large), encoded properties, sysFlag and the message's UNIQ_KEY."""
        body, sys_flag = message.body, 0
        if len(body) >= self.compress_over:
            body, sys_flag = compress(body, self.compression, self.compress_level), self.compression.sys_flag
        if message.bare:  # the usual case: the new id is the only property
            uniq = self._uniq.next()
            self._check(message, _BARE_PROPS_SIZE, body)
            return body, f"UNIQ_KEY\x01{uniq}\x02", sys_flag, uniq
        props = message.system_properties()
        uniq = props.setdefault(Prop.UNIQ_KEY, self._uniq.next())
        encoded = encode_properties(props)
        self._check(message, len(encoded) if encoded.isascii() else len(encoded.encode()), body)
        return body, encoded, sys_flag, uniq

    def _check(self, message: Message, props_size: int, body: bytes | None = None) -> None:
        """Raise SendError for what no broker would take; `props_size`: the encoded properties' bytes."""
        if type(message.body) is not bytes and not isinstance(message.body, bytearray | memoryview):
            raise SendError(f"message body must be bytes, not {type(message.body).__name__}")
        size = len(body if body is not None else message.body)
        if size == 0:
            raise SendError("message body is empty")
        if size > self.max_message_size:
            raise SendError(f"message body is {size} bytes, over max_message_size {self.max_message_size}")
        if props_size > MAX_PROPERTIES_SIZE:
            raise SendError(f"message properties are {props_size} bytes, over {MAX_PROPERTIES_SIZE}")
        if not message.topic:
            raise SendError("message topic is empty")

    async def _route(self, topic: str) -> TopicRoute:
        if not self._started:
            raise SendError("the producer is not started")
        route = await self.instance.route(topic)
        if not route.write_queues:  # e.g. its master is gone: a successor may have registered since
            route = await self.instance.refresh_route(topic)
        if not route.write_queues:
            raise SendError(f"topic {topic} has no writable queue", unavailable=True)
        return route

    def _pick(self, queues: Sequence[MessageQueue], avoid: str | None) -> MessageQueue:
        """Round-robin over queues, skipping brokers in back-off (and the one that just failed)."""
        if avoid is None and not self.avoidance.benched:  # the usual case: every broker is fine
            self._round_robin += 1
            return queues[self._round_robin % len(queues)]
        for _ in range(len(queues)):
            self._round_robin += 1
            mq = queues[self._round_robin % len(queues)]
            if mq.broker_name != avoid and self.avoidance.available(mq.broker_name):
                return mq
        self._round_robin += 1
        return queues[self._round_robin % len(queues)]  # every broker is suspect: try one anyway

    def _request(self, mq: MessageQueue, body: bytes, props: str, flag: int, sys_flag: int, batch: bool):
        headers = self._headers.get(mq)
        if headers is None:
            if len(self._headers) >= _MAX_HEADER_TEMPLATES:  # a producer of very many topics
                self._headers.clear()
            # SEND_MESSAGE_V2's one-letter keys: producerGroup, topic, defaultTopic, defaultTopicQueueNums,
            # queueId, sysFlag, bornTimestamp, flag, properties, reconsumeTimes, unitMode.
            headers = self._headers[mq] = {
                "a": self.group, "b": mq.topic, "c": AUTO_CREATE_TOPIC, "d": "4", "e": str(mq.queue_id),
                "f": "0", "g": "", "h": "0", "i": "", "j": "0", "k": "false",
            }  # fmt: skip
        born = str(time.time_ns() // 1_000_000)
        if flag or sys_flag:
            ext = dict(headers, f=str(sys_flag), g=born, h=str(flag), i=props)
        else:  # copying the queue's headers costs a third of building them
            ext = dict(headers, g=born, i=props)
        if batch:
            ext["m"] = "true"
        elif mq.topic.startswith(RETRY_PREFIX):  # a consumer's redelivery: the broker reads its count here
            ext["j"] = _find(props, Prop.RECONSUME_TIME) or "0"
            max_times = _find(props, Prop.MAX_RECONSUME_TIMES)
            if max_times is not None:
                ext["l"] = max_times
        code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
        return RemotingCommand(code, ext_fields=ext, body=body)

    async def _send(
        self, topic, body, props, flag, sys_flag, batch, selector, message, arg, msg_id
    ) -> SendResult:
        failed_broker = None
        last_error: Exception | None = None
        for attempt in range(1 + (0 if selector else self.retries)):
            if attempt:
                await self.instance.refresh_route(topic)
            route = self.instance.routes.get(topic) if self._started and not attempt else None
            if route is None or not route.write_queues:  # not cached, or no writable queue in it
                route = await self._route(topic)  # the fresh route may have lost its writable queues
            queues = route.write_queues
            if not queues:  # e.g. the master is gone and its successor has not registered yet
                last_error = SendError(f"topic {topic} has no writable queue now")
                continue
            mq = selector(queues, message, arg) if selector else self._pick(queues, failed_broker)
            addr = route.masters[mq.broker_name]
            started = time.monotonic()
            try:
                response = await self._invoke(addr, mq, body, props, flag, sys_flag, batch)
                if response.code == ResponseCode.SYSTEM_BUSY:
                    response = await self._resend_while_busy(
                        response, started, addr, mq, body, props, flag, sys_flag, batch
                    )
            except RemotingError as e:
                last_error = e
            else:
                status = _STATUS.get(response.code)
                if status is not None:
                    self.avoidance.succeeded(mq.broker_name, time.monotonic() - started)
                    ext = response.ext_fields
                    return SendResult(
                        status, msg_id, ext.get("msgId", ""), mq, int(ext.get("queueOffset", -1)),
                        ext.get("MSG_REGION", "DefaultRegion"), ext.get("TRACE_ON") != "false",
                    )  # fmt: skip
                last_error = SendError(f"broker {mq.broker_name} refused: {response.remark}", response.code)
                if response.code not in _RETRY_CODES:
                    raise last_error
            failed_broker = mq.broker_name
            self.failed_attempts += 1
            self.avoidance.failed(mq.broker_name)
            log.warning("send to %s (%s) failed: %s; %s", mq.broker_name, addr, last_error,
                        "retrying" if attempt < self.retries else "giving up")  # fmt: skip
        raise SendError(
            f"send to topic {topic} failed after {1 + self.retries} attempts: {last_error}", unavailable=True
        ) from last_error

    def _invoke(self, addr, mq, body, props, flag, sys_flag, batch) -> Awaitable[RemotingCommand]:
        """The request's answer to await (the call itself, not a coroutine around it: one frame less
        for every send to pass through)."""
        request = self._request(mq, body, props, flag, sys_flag, batch)
        timeout = self.send_timeout or self.instance.request_timeout
        return self.instance.remoting.call(addr, request, timeout)

    async def _resend_while_busy(self, response, started, addr, *request) -> RemotingCommand:
        """After a flow-control answer: wait (10 ms doubling to 250 ms) and send again while `addr`
        answers so, for up to `flow_control_timeout` s from `started`; then its last answer."""
        deadline, pause = started + self.flow_control_timeout, 0.01
        while response.code == ResponseCode.SYSTEM_BUSY and time.monotonic() + pause <= deadline:
            self.flow_controlled += 1
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.25)
            response = await self._invoke(addr, *request)
        return response


class _Batcher:
    """Gathers concurrent sends per topic into batches (size- or linger-triggered)."""

    def __init__(self, producer: Producer, tasks: BackgroundTasks, linger: float, max_bytes: int) -> None:
        self.producer = producer
        self.tasks = tasks
        self.linger = linger
        self.max_bytes = max_bytes
        self._pending: dict[str, list[tuple[Message, asyncio.Future]]] = {}
        self._sizes: dict[str, int] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}

    async def add(self, message: Message) -> SendResult:
        future = asyncio.get_running_loop().create_future()
        topic = message.topic
        self._pending.setdefault(topic, []).append((message, future))
        self._sizes[topic] = self._sizes.get(topic, 0) + len(message.body) + 100
        if self._sizes[topic] >= self.max_bytes:
            self._flush(topic)
        elif topic not in self._timers:
            self._timers[topic] = asyncio.get_running_loop().call_later(self.linger, self._flush, topic)
        return await future

    def _flush(self, topic: str) -> None:
        timer = self._timers.pop(topic, None)
        if timer is not None:
            timer.cancel()
        batch = self._pending.pop(topic, [])
        self._sizes.pop(topic, None)
        if batch:
            self.tasks.spawn(self._send(batch), name=f"send batch {topic}")

    async def _send(self, batch: list[tuple[Message, asyncio.Future]]) -> None:
        try:
            result = await self.producer.send_batch([m for m, _ in batch])
        except Exception as e:
            for _, future in batch:
                if not future.done():
                    future.set_exception(e)
            return
        uniq_keys = result.msg_id.split(",")
        offset_ids = result.offset_msg_id.split(",")
        for i, (_, future) in enumerate(batch):
            if not future.done():
                offset_id = offset_ids[i] if i < len(offset_ids) else ""
                queue_offset = result.queue_offset + i
                future.set_result(
                    dataclasses.replace(
                        result, msg_id=uniq_keys[i], offset_msg_id=offset_id, queue_offset=queue_offset
                    )
                )

    async def flush_all(self) -> None:
        futures = [f for batch in self._pending.values() for _, f in batch]
        for topic in list(self._pending):
            self._flush(topic)
        if futures:
            await asyncio.gather(*futures, return_exceptions=True)
