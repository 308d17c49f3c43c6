"""The message service of a cluster, over remoting (RocketMQ 5 proxy's cluster mode): routes from the
NameServers (the SDK's route cache), then SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE to a master,
PULL_MESSAGE to the broker the last read suggested, and the offset requests to the queue's master.

The brokers apply every rule; this side only picks where a request goes and turns answers into the
same outcomes the local service gives.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections.abc import Callable

from ferrymq.client import pop_calls
from ferrymq.client.admin import Admin
from ferrymq.client.instance import ClientError, ClientInstance, TLSOption, TopicRoute
from ferrymq.client.pull import master_addr, pull_addr, query_offset, queue_offset
from ferrymq.messaging.api import (
    DEFAULT_MAX_BODY_SIZE,
    Arrivals,
    ClientCalls,
    ClientRegistration,
    MessageQueue,
    MessagingError,
    PopOutcome,
    QueueData,
    ReadOutcome,
    SendOutcome,
    SubscriptionGroupConfig,
    TopicConfig,
)
from ferrymq.messaging.user_quotas import UserQuotas
from ferrymq.net import RemotingError
from ferrymq.net.client import ADDRESS
from ferrymq.net.connection import Connection
from ferrymq.protocol.batch import scan_batch
from ferrymq.protocol.bodies import (
    HeartbeatData,
    ProducerData,
    SubscriptionGroupWrapper,
    decode_body,
    encode_body,
)
from ferrymq.protocol.caller import CALLER
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    PullMessageRequestHeader,
    RecallMessageRequestHeader,
    SendMessageRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from ferrymq.protocol.message_ext import decode_records
from ferrymq.protocol.message_id import parse_offset_msg_id
from ferrymq.protocol.pop import INIT_MODE_MAX, ReceiptHandle, real_topic
from ferrymq.protocol.recall import RecallHandle
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.protocol.sys_flag import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from ferrymq.protocol.topic_names import AUTO_CREATE_TOPIC

log = logging.getLogger(__name__)

AUTO_CREATE_QUEUE_NUMS = 4
TOPIC_CONFIG_TTL_S = 20.0  # RocketMQ proxy's topicConfigCacheExpiredSeconds
QUOTA_TTL_S = 10.0  # how long the brokers' per-user quotas are taken as read
TOPIC_VISIBLE_TIMEOUT_S = 5.0  # a topic just created is in the NameServers' routes by then
ROUTE_TTL_S = 20.0  # RocketMQ proxy's topicRouteCacheExpiredSeconds; dropped at once when a send fails
DEAD_LETTER_HOLD_MS = 60_000  # a message being moved to the DLQ stays invisible this long at most
FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 0x1, 0x2, 0x4
# the brokers' requests to the clients this service registers, which arrive on its connections
CLIENT_CALLS = (
    RequestCode.CHECK_TRANSACTION_STATE, RequestCode.GET_CONSUMER_RUNNING_INFO,
    RequestCode.CONSUME_MESSAGE_DIRECTLY, RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
)  # fmt: skip
_PULL_CODES = frozenset(
    (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
     ResponseCode.PULL_OFFSET_MOVED)
)  # fmt: skip


class RemoteMessageService:
    def __init__(
        self, namesrv_addr: str, *, request_timeout: float = 3.0, max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        tls: TLSOption = False, access_key: str | None = None, secret_key: str | None = None,
    ) -> None:  # fmt: skip
        """``access_key``/``secret_key``: sign requests to brokers with authentication on."""
        self.instance = ClientInstance(
            namesrv_addr,
            request_timeout=request_timeout,
            tls=tls,
            access_key=access_key,
            secret_key=secret_key,
        )
        self.max_body_size = max_body_size  # the brokers' max_message_size
        self._turn = itertools.count()  # pops of any queue take the topic's masters in turn
        self._topic_configs: dict[str, tuple[float, TopicConfig]] = {}  # by topic: (good until, config)
        self.user_quotas = UserQuotas(self._list_quotas, QUOTA_TTL_S)  # its clients' (CALLER's)
        self._routes: dict[str, tuple[float, TopicRoute]] = {}  # by topic: (good until, its own route)

    async def start(self) -> RemoteMessageService:
        await self.instance.start()
        return self

    async def close(self) -> None:
        await self.instance.close()

    async def __aenter__(self) -> RemoteMessageService:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # --- producing --------------------------------------------------------------------------------

    async def _target(self, topic: str, queue: MessageQueue | None) -> tuple[str, MessageQueue]:
        """The master address and queue a send goes to. A topic without a writable queue still goes
        to one of its brokers, which answers why not (NO_PERMISSION)."""
        route = await self.instance.route(topic)
        if queue is None:
            candidates = route.write_queues or [
                MessageQueue(topic=topic, broker_name=q.broker_name, queue_id=i)
                for q in route.data.queue_datas
                if q.broker_name in route.masters
                for i in range(max(q.write_queue_nums, 1))
            ]
            if not candidates:
                raise ClientError(f"no broker of topic {topic} has a master now")
            queue = random.choice(candidates)
        return await master_addr(self.instance, queue), queue

    async def _send(
        self, code: int, topic: str, body: bytes | memoryview, properties: str, queue: MessageQueue | None,
        flag: int, sys_flag: int, born_timestamp: int, reconsume_times: int, producer_group: str, batch: bool,
    ) -> SendOutcome:  # fmt: skip
        user = CALLER.get()
        try:
            refusal = await self.user_quotas.admit_put(user)
        except MessagingError as e:  # the brokers apply the rest; a user quota unknown is not applied
            log.warning("user quotas unknown, not applied: %s", e)
            refusal = None
        if refusal is not None:
            return SendOutcome(ResponseCode.SYSTEM_BUSY, refusal)
        try:
            addr, queue = await self._target(topic, queue)
        except ClientError as e:  # no master now (one is being elected): the next send asks again
            self._routes.pop(topic, None)
            return SendOutcome(ResponseCode.TOPIC_NOT_EXIST, str(e))
        header = SendMessageRequestHeader(
            producer_group=producer_group or "ferrymq-messaging",
            topic=topic,
            default_topic=AUTO_CREATE_TOPIC,
            default_topic_queue_nums=AUTO_CREATE_QUEUE_NUMS,
            queue_id=queue.queue_id,
            sys_flag=sys_flag,
            born_timestamp=born_timestamp,
            flag=flag,
            properties=properties or None,
            reconsume_times=reconsume_times,
            batch=batch,
        )
        request = RemotingCommand(code, ext_fields=header.to_ext_fields_v2(), body=bytes(body))
        try:
            response = await self._invoke(addr, request)
        except MessagingError:  # the broker may be gone: the next send asks where its queues are now
            self._routes.pop(topic, None)
            raise
        ext = response.ext_fields or {}
        if "msgId" not in ext:
            self._routes.pop(topic, None)  # a master demoted, a broker shutting down ...
            return SendOutcome(response.code, response.remark)
        if user is not None:
            self.user_quotas.charge_put(user, scan_batch(body)[0] if batch else 1, len(body))
        return SendOutcome(
            response.code, response.remark, queue.broker_name, int(ext["queueId"]), int(ext["queueOffset"]),
            ext["msgId"], ext.get("transactionId"), ext.get("recallHandle"),
        )  # fmt: skip

    async def send(
        self,
        topic: str,
        body: bytes | memoryview,
        properties: str = "",
        *,
        queue: MessageQueue | None = None,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: bytes | None = None,
        reconsume_times: int = 0,
        producer_group: str = "",
    ) -> SendOutcome:
        return await self._send(
            RequestCode.SEND_MESSAGE_V2, topic, body, properties, queue, flag, sys_flag, born_timestamp,
            reconsume_times, producer_group, False,
        )  # fmt: skip

    async def send_batch(
        self,
        topic: str,
        batch_body: bytes | memoryview,
        *,
        queue: MessageQueue | None = None,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: bytes | None = None,
        producer_group: str = "",
    ) -> SendOutcome:
        return await self._send(
            RequestCode.SEND_BATCH_MESSAGE, topic, batch_body, "", queue, 0, sys_flag, born_timestamp, 0,
            producer_group, True,
        )  # fmt: skip

    async def recall(self, topic: str, recall_handle: str, *, producer_group: str = "") -> str:
        """RECALL_MESSAGE to the master of the broker the handle names."""
        try:
            broker_name = RecallHandle.decode(recall_handle).broker_name
        except ValueError as e:
            raise MessagingError(str(e), ResponseCode.ILLEGAL_OPERATION) from None
        try:
            addr = await master_addr(
                self.instance, MessageQueue(topic=topic, broker_name=broker_name, queue_id=0)
            )
        except ClientError as e:
            raise MessagingError(str(e), ResponseCode.TOPIC_NOT_EXIST) from e
        header = RecallMessageRequestHeader(
            topic=topic, recall_handle=recall_handle, producer_group=producer_group or None
        )
        response = await self._invoke(
            addr, RemotingCommand(RequestCode.RECALL_MESSAGE, ext_fields=header.to_ext_fields())
        )
        if response.code != ResponseCode.SUCCESS:
            raise MessagingError(response.remark or f"recall refused ({response.code})", response.code)
        return (response.ext_fields or {}).get("msgId", "")

    # --- consuming by queue and offset ----------------------------------------------------------

    async def read(
        self,
        group: str,
        queue: MessageQueue,
        offset: int,
        max_count: int = 32,
        *,
        expression: str = "*",
        expression_type: str = "TAG",
        suspend_ms: int = 0,
        commit_offset: int = -1,
    ) -> ReadOutcome:
        instance = self.instance
        try:
            addr = await pull_addr(instance, queue)
        except ClientError as e:
            return ReadOutcome(ResponseCode.TOPIC_NOT_EXIST, str(e))
        flags = FLAG_SUBSCRIPTION | (FLAG_SUSPEND if suspend_ms > 0 else 0)
        flags |= FLAG_COMMIT_OFFSET if commit_offset >= 0 else 0
        header = PullMessageRequestHeader(
            consumer_group=group,
            topic=queue.topic,
            queue_id=queue.queue_id,
            queue_offset=offset,
            max_msg_nums=max_count,
            sys_flag=flags,
            commit_offset=commit_offset,
            suspend_timeout_millis=suspend_ms,
            sub_version=0,
            subscription=expression,
            expression_type=expression_type,
        )
        request = RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=header.to_ext_fields())
        response = await self._invoke(addr, request, instance.request_timeout + suspend_ms / 1000)
        if response.code not in _PULL_CODES:
            return ReadOutcome(response.code, response.remark)
        ext = response.ext_fields
        suggested = int(ext.get("suggestWhichBrokerId") or 0)
        instance.suggested_broker_ids[queue] = suggested
        return ReadOutcome(
            response.code, response.remark, int(ext["nextBeginOffset"]), int(ext["minOffset"]),
            int(ext["maxOffset"]), suggested, [response.body] if response.body else [],
        )  # fmt: skip

    async def query_offset(self, group: str, queue: MessageQueue) -> int | None:
        try:
            return await query_offset(self.instance, await master_addr(self.instance, queue), queue, group)
        except (ClientError, RemotingError) as e:
            raise MessagingError(f"query offset of {group} on {queue}: {e}") from e

    async def commit_offset(self, group: str, queue: MessageQueue, offset: int) -> None:
        try:
            addr = await master_addr(self.instance, queue)
        except ClientError as e:
            raise MessagingError(str(e), ResponseCode.TOPIC_NOT_EXIST) from e
        header = UpdateConsumerOffsetRequestHeader(
            consumer_group=group, topic=queue.topic, queue_id=queue.queue_id, commit_offset=offset
        )
        command = RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=header.to_ext_fields())
        response = await self._invoke(addr, command)
        if response.code != ResponseCode.SUCCESS:
            raise MessagingError(f"commit offset of {group} on {queue}: {response.remark}", response.code)

    async def queue_bounds(self, queue: MessageQueue) -> tuple[int, int]:
        low = await self._queue_offset(queue, RequestCode.GET_MIN_OFFSET)
        return low, await self._queue_offset(queue, RequestCode.GET_MAX_OFFSET)

    async def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int:
        return await self._queue_offset(
            queue, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp=str(timestamp_ms)
        )

    async def _queue_offset(self, queue: MessageQueue, code: int, **extra: str) -> int:
        try:
            return await queue_offset(
                self.instance, await master_addr(self.instance, queue), queue, code, **extra
            )
        except (ClientError, RemotingError) as e:
            raise MessagingError(f"offset of {queue}: {e}") from e

    async def consumer_group(self, group: str, topic: str) -> SubscriptionGroupConfig | None:
        try:
            masters = sorted((await self.instance.route(topic)).masters.values())
        except ClientError as e:
            raise MessagingError(str(e), ResponseCode.TOPIC_NOT_EXIST) from e
        if not masters:
            raise MessagingError(f"no broker of topic {topic} has a master now")
        request = RemotingCommand(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        response = await self._invoke(masters[0], request)
        if response.code != ResponseCode.SUCCESS:
            raise MessagingError(response.remark or f"groups refused ({response.code})", response.code)
        return decode_body(SubscriptionGroupWrapper, response.body).subscription_group_table.get(group)

    # --- routes -------------------------------------------------------------------------------------

    async def route(self, topic: str) -> list[QueueData] | None:
        route = await self._existing_route(topic)
        return None if route is None else list(route.data.queue_datas)

    async def _existing_route(self, topic: str) -> TopicRoute | None:
        """The topic's own route, kept ROUTE_TTL_S so that sends do not each ask the NameServers
        (a topic without one is asked about again each time: it may be created any moment)."""
        kept = self._routes.get(topic)
        if kept is not None and kept[0] > time.monotonic():
            return kept[1]
        try:
            route = await self.instance.existing_route(topic)
        except ClientError as e:
            raise MessagingError(str(e)) from e
        if route is None:
            self._routes.pop(topic, None)
        else:
            self._routes[topic] = (time.monotonic() + ROUTE_TTL_S, route)
        return route

    async def topic_config(self, topic: str) -> TopicConfig | None:
        """GET_TOPIC_CONFIG to a master of the topic; a config found is kept TOPIC_CONFIG_TTL_S (as
        RocketMQ's proxy keeps it), so sends do not ask for it each time."""
        kept = self._topic_configs.get(topic)
        if kept is not None and kept[0] > time.monotonic():
            return kept[1]
        route = await self._existing_route(topic)
        if route is None:
            return None
        masters = sorted(route.masters.values())
        if not masters:
            raise MessagingError(f"no broker of topic {topic} has a master now")
        request = RemotingCommand(RequestCode.GET_TOPIC_CONFIG, ext_fields={"topic": topic})
        response = await self._invoke(masters[0], request)
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise MessagingError(response.remark or f"topic config refused ({response.code})", response.code)
        config = decode_body(TopicConfig, response.body)
        self._topic_configs[topic] = (time.monotonic() + TOPIC_CONFIG_TTL_S, config)
        return config

    @property
    def in_process(self) -> bool:
        return False

    def watch_arrivals(self, listener: Arrivals) -> Callable[[], None] | None:
        return None  # the brokers tell a front of no arrival: it long-polls

    async def user_connection_limit(self, user: str) -> int | None:
        """From the quotas of the first broker that answers, asked again after QUOTA_TTL_S."""
        return (await self.user_quotas.current()).max_connections(user)

    def user_consume_allowance(self, user: str) -> tuple[float, float]:
        return self.user_quotas.consume_allowance_now(user)

    def charge_user_consume(self, user: str, count: int, nbytes: int) -> None:
        self.user_quotas.charge_consume(user, count, nbytes)

    async def _list_quotas(self) -> list[dict]:
        try:
            return await Admin(self.instance.namesrvs[0], instance=self.instance).list_quotas()
        except (ClientError, RemotingError) as e:
            raise MessagingError(f"cannot read the brokers' quotas: {e}") from e

    async def create_topic(self, topic: str, queue_nums: int = 1) -> None:
        admin = Admin(self.instance.namesrvs[0], instance=self.instance)
        try:
            await admin.create_topic(topic, queue_nums)
            async with asyncio.timeout(TOPIC_VISIBLE_TIMEOUT_S):
                while await self.instance.existing_route(topic) is None:
                    await asyncio.sleep(0.05)  # the brokers register the change at once
        except ClientError as e:
            raise MessagingError(str(e)) from e
        except TimeoutError:
            raise MessagingError(
                f"topic {topic} created but not routable after {TOPIC_VISIBLE_TIMEOUT_S:g} s"
            ) from None
        self._routes.pop(topic, None)
        self._topic_configs.pop(topic, None)

    async def delete_topic(self, topic: str) -> None:
        try:
            await Admin(self.instance.namesrvs[0], instance=self.instance).delete_topic(topic)
        except (ClientError, RemotingError) as e:
            raise MessagingError(str(e)) from e
        self._routes.pop(topic, None)
        self._topic_configs.pop(topic, None)

    # --- pop-style consumption: POP_MESSAGE to a master, settled at the master the handle names --

    async def pop(
        self,
        group: str,
        topic: str,
        max_count: int = 32,
        invisible_ms: int = 60_000,
        *,
        queue: MessageQueue | None = None,
        expression: str = "*",
        expression_type: str = "TAG",
        poll_ms: int = 0,
        fifo: bool = False,
        init_mode: int = INIT_MODE_MAX,
    ) -> PopOutcome:
        user = CALLER.get()
        if user is not None:
            max_count = await self._user_may_take(user, max_count, poll_ms)
            if not max_count:
                return PopOutcome(ResponseCode.POLLING_TIMEOUT, f"User:{user} is over its consume quota")
        try:
            if queue is None:
                masters = sorted((await self.instance.route(topic)).masters.values())
                if not masters:
                    raise ClientError(f"no broker of topic {topic} has a master now")
                addr = masters[next(self._turn) % len(masters)]
            else:
                addr = await master_addr(self.instance, queue)
            response = await pop_calls.pop(
                self.instance, addr, group, topic, queue_id=-1 if queue is None else queue.queue_id,
                max_messages=max_count, invisible_ms=invisible_ms, poll_ms=poll_ms,
                expression_type=expression_type, expression=expression, init_mode=init_mode, order=fifo,
            )  # fmt: skip
        except ClientError as e:
            return PopOutcome(ResponseCode.TOPIC_NOT_EXIST, str(e))
        if user is not None and response.code == ResponseCode.SUCCESS and response.body:
            self.user_quotas.charge_consume(user, len(decode_records(response.body)), len(response.body))
        return PopOutcome(response.code, response.remark, response.body or b"")

    async def _user_may_take(self, user: str, wanted: int, poll_ms: int) -> int:
        """How many messages a pop for ``user`` may take (0: none), waiting up to its poll time for
        the user's consume quota to allow one."""
        deadline = time.monotonic() + poll_ms / 1000
        while True:
            try:
                allowed, wait = await self.user_quotas.consume_allowance(user)
            except MessagingError as e:
                log.warning("user quotas unknown, not applied: %s", e)
                return wanted
            if allowed >= 1:
                return int(min(wanted, allowed))
            left = deadline - time.monotonic()
            if left <= 0:
                return 0
            await asyncio.sleep(min(max(wait, 0.001), left))

    async def ack(self, group: str, topic: str, receipt_handle: str) -> None:
        try:
            response = await pop_calls.ack(self.instance, group, topic, receipt_handle)
        except pop_calls.InvalidHandle as e:
            raise MessagingError(str(e), ResponseCode.INVALID_PARAMETER) from e
        except ClientError as e:
            raise MessagingError(str(e)) from e
        if response.code != ResponseCode.SUCCESS:
            raise MessagingError(response.remark or f"ack refused ({response.code})", response.code)

    async def ack_batch(
        self, group: str, topic: str, receipt_handles: list[str]
    ) -> list[MessagingError | None]:
        """One ACK_MESSAGE per handle, all at once."""
        results = await asyncio.gather(
            *(self.ack(group, topic, h) for h in receipt_handles), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, MessagingError):
                raise r
        return [r if isinstance(r, MessagingError) else None for r in results]

    async def change_invisible_time(
        self, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        try:
            response, renewed = await pop_calls.change_invisible(
                self.instance, group, topic, receipt_handle, invisible_ms
            )
        except pop_calls.InvalidHandle as e:
            raise MessagingError(str(e), ResponseCode.INVALID_PARAMETER) from e
        except ClientError as e:
            raise MessagingError(str(e)) from e
        if renewed is None:
            raise MessagingError(response.remark or f"change refused ({response.code})", response.code)
        return renewed

    async def end_transaction(
        self,
        producer_group: str,
        sent: SendOutcome,
        commit: bool,
        *,
        topic: str = "",
        transaction_id: str = "",
    ) -> None:
        try:
            _, _, commit_log_offset = parse_offset_msg_id(sent.msg_id)
            mq = MessageQueue(topic=topic, broker_name=sent.broker_name, queue_id=sent.queue_id)
            addr = await master_addr(self.instance, mq)
        except (MessageDecodeError, ClientError) as e:
            raise MessagingError(str(e)) from e
        header = EndTransactionRequestHeader(
            producer_group=producer_group, tran_state_table_offset=sent.queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=TRANSACTION_COMMIT_TYPE if commit else TRANSACTION_ROLLBACK_TYPE,
            msg_id=transaction_id or sent.msg_id, topic=topic or None, from_transaction_check=False,
            transaction_id=transaction_id or None,
        )  # fmt: skip
        request = RemotingCommand(RequestCode.END_TRANSACTION, ext_fields=header.to_ext_fields())
        response = await self._invoke(addr, request)
        if response.code != ResponseCode.SUCCESS:
            raise MessagingError(
                response.remark or f"end of transaction refused ({response.code})", response.code
            )

    async def dead_letter(self, group: str, topic: str, receipt_handle: str) -> None:
        """As RocketMQ's proxy: CONSUMER_SEND_MSG_BACK with delay level -1 (straight to the DLQ), then
        the ack. The handle carries no CommitLog offset, so the message is read at its queue offset
        first; a change of invisible time before proves the handle current and keeps the message
        from coming back meanwhile."""
        held = await self.change_invisible_time(group, topic, receipt_handle, DEAD_LETTER_HOLD_MS)
        handle = ReceiptHandle.decode(held)
        mq = MessageQueue(
            topic=real_topic(handle.kind, topic, group), broker_name=handle.broker_name,
            queue_id=handle.queue_id,
        )  # fmt: skip
        got = await self.read(group, mq, handle.offset, 1)
        records = decode_records(got.body()) if got.code == ResponseCode.SUCCESS else []
        record = next((r for r in records if r.queue_offset == handle.offset), None)
        if record is None:
            raise MessagingError(f"message {mq}@{handle.offset} is no longer stored", got.code)
        header = ConsumerSendMsgBackRequestHeader(
            offset=record.commitlog_offset, group=group, delay_level=-1, origin_msg_id=record.msg_id,
            origin_topic=topic,
        )  # fmt: skip
        try:
            addr = await master_addr(self.instance, mq)
        except ClientError as e:
            raise MessagingError(str(e)) from e
        request = RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=header.to_ext_fields())
        response = await self._invoke(addr, request)
        if response.code != ResponseCode.SUCCESS:
            raise MessagingError(response.remark or f"dead letter refused ({response.code})", response.code)
        await self.ack(group, topic, held)

    # --- clients the brokers call back: heartbeats on their behalf, to each master of their topics --

    async def _masters_of(self, topics: tuple[str, ...]) -> set[str]:
        addrs: set[str] = set()
        for topic in topics:
            try:
                addrs.update((await self.instance.route(topic)).masters.values())
            except ClientError:  # a topic without a route has no broker to tell
                continue
        return addrs

    async def register_client(self, client: ClientRegistration) -> None:
        data = HeartbeatData(
            client_id=client.client_id,
            producer_data_set=[ProducerData(group_name=g) for g in client.producer_groups],
            consumer_data_set=list(client.consumers),
        )
        request_body = encode_body(data)
        failures = []
        for addr in sorted(await self._masters_of(client.topics)):
            try:
                response = await self._invoke(
                    addr, RemotingCommand(RequestCode.HEART_BEAT, body=request_body)
                )
            except MessagingError as e:
                failures.append(str(e))
                continue
            if response.code != ResponseCode.SUCCESS:
                failures.append(f"{addr}: {response.remark}")
        if failures:
            raise MessagingError(f"heartbeat of {client.client_id}: " + "; ".join(failures))

    async def unregister_client(self, client: ClientRegistration) -> None:
        headers = [
            UnregisterClientRequestHeader(client.client_id, producer_group=g) for g in client.producer_groups
        ]
        headers += [
            UnregisterClientRequestHeader(client.client_id, consumer_group=c.group_name)
            for c in client.consumers
        ]
        for addr in sorted(await self._masters_of(client.topics)):
            for header in headers:
                request = RemotingCommand(RequestCode.UNREGISTER_CLIENT, ext_fields=header.to_ext_fields())
                await self._invoke(addr, request)

    def serve_client_calls(self, calls: ClientCalls) -> None:
        async def handle(conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
            return await calls(self._broker_at(conn.attributes.get(ADDRESS, conn.remote_address)), request)

        for code in CLIENT_CALLS:
            self.instance.remoting.register(code, handle)

    def _broker_at(self, addr: str) -> str:
        """The name of the master at `addr`, as the routes this service knows say ("" if none)."""
        for route in self.instance.routes.values():
            for name, master in route.masters.items():
                if master == addr:
                    return name
        return ""

    async def _invoke(
        self, addr: str, request: RemotingCommand, timeout: float | None = None
    ) -> RemotingCommand:
        try:
            return await self.instance.invoke(addr, request, timeout)
        except RemotingError as e:
            raise MessagingError(f"{addr}: {e}") from e
