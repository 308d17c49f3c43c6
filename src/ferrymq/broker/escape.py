"""The escape bridge (RocketMQ 5's EscapeBridge): a slave acting for its missing master cannot write
its own log (it is the master's copy), so the messages it must put — scheduled messages now due,
committed transactions — go to a master of another broker group of the cluster that serves the
topic, as a producer would send them.

The target is picked from the topic's route (NameServers), round robin over the other groups'
masters that may be written; the queue is the message's own queue id modulo the target's count.
A topic that no other group serves cannot escape: the put fails and its caller retries later.
"""

from __future__ import annotations

import itertools
import logging
import time

from ferrymq.net import RemotingClient, RemotingError
from ferrymq.protocol.bodies import TopicRouteData, decode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.errors import MessageDecodeError, ProtocolError
from ferrymq.protocol.headers import SendMessageRequestHeader
from ferrymq.protocol.message_ext import decode_record
from ferrymq.protocol.properties import Prop, decode_properties, encode_properties
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.protocol.topic_names import AUTO_CREATE_TOPIC
from ferrymq.store import PutResult, PutStatus

log = logging.getLogger(__name__)

ROUTE_TTL = 5.0  # seconds a topic's route is reused
SEND_TIMEOUT = 3.0
PRODUCER_GROUP = "FERRYMQ_ESCAPE_BRIDGE"
_PERM_WRITE = 2


class EscapeBridge:
    def __init__(self, client: RemotingClient, namesrv_addrs: list[str], broker_name: str) -> None:
        """`broker_name`: this broker's group, which is never a target."""
        self.client = client
        self.namesrv_addrs = namesrv_addrs
        self.broker_name = broker_name
        self._routes: dict[str, tuple[float, list[tuple[str, int]]]] = {}
        self._turn = itertools.count()
        self.escaped = 0  # messages put on other groups' masters

    async def redeliver(
        self, record: memoryview | None, drop: tuple[bytes, ...], add: bytes = b""
    ) -> PutResult:
        """`schedule.redeliver` over the bridge: the held-back message to its REAL_TOPIC / REAL_QID on
        another master, with the properties in `drop` left out and `add` appended."""
        if record is None:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, "held-back message is no longer stored")
        try:
            msg = decode_record(record)
        except MessageDecodeError:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, "held-back message is not a whole record")
        topic, queue_id = msg.properties.get(Prop.REAL_TOPIC), msg.properties.get(Prop.REAL_QID, "")
        if not topic or not queue_id.isdigit():
            return PutResult(PutStatus.MESSAGE_ILLEGAL, "held-back message has no REAL_TOPIC / REAL_QID")
        dropped = {key.decode().rstrip("\x01") for key in drop}
        props = {k: v for k, v in msg.properties.items() if k not in dropped}
        props.update(decode_properties(add))
        return await self.put(topic, int(queue_id), msg.body, props, msg.flag, msg.sys_flag,
                              msg.born_timestamp, msg.reconsume_times)  # fmt: skip

    async def put(
        self, topic: str, queue_id: int, body: bytes, props: dict[str, str], flag: int = 0, sys_flag: int = 0,
        born_timestamp: int = 0, reconsume_times: int = 0,
    ) -> PutResult:  # fmt: skip
        """Send one message to a master of another group serving `topic`; PUT_OK once it is stored."""
        targets = await self._targets(topic)
        if not targets:
            return PutResult(
                PutStatus.SERVICE_NOT_AVAILABLE, f"no other master of the cluster serves {topic}"
            )
        addr, queues = targets[next(self._turn) % len(targets)]
        header = SendMessageRequestHeader(
            producer_group=props.get(Prop.PGROUP, PRODUCER_GROUP), topic=topic,
            default_topic=AUTO_CREATE_TOPIC, default_topic_queue_nums=4, queue_id=queue_id % queues,
            sys_flag=sys_flag, born_timestamp=born_timestamp, flag=flag, properties=encode_properties(props),
            reconsume_times=reconsume_times,
        )  # fmt: skip
        request = RemotingCommand(RequestCode.SEND_MESSAGE, ext_fields=header.to_ext_fields(), body=body)
        try:
            response = await self.client.invoke(addr, request, SEND_TIMEOUT)
        except RemotingError as e:
            self._routes.pop(topic, None)
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, f"escape to {addr} failed: {e}")
        if response.code != ResponseCode.SUCCESS:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, f"{addr} refused: {response.remark}")
        self.escaped += 1
        return PutResult(PutStatus.PUT_OK)

    async def _targets(self, topic: str) -> list[tuple[str, int]]:
        """(master address, write queues) of the other groups serving `topic`."""
        cached = self._routes.get(topic)
        if cached is not None and time.monotonic() - cached[0] < ROUTE_TTL:
            return cached[1]
        route = await self._route(topic)
        targets = []
        if route is not None:
            writable = {
                q.broker_name: q.write_queue_nums
                for q in route.queue_datas
                if q.perm & _PERM_WRITE and q.write_queue_nums > 0
            }
            for data in route.broker_datas:
                addr = data.broker_addrs.get(0)
                if data.broker_name != self.broker_name and addr and data.broker_name in writable:
                    targets.append((addr, writable[data.broker_name]))
        self._routes[topic] = (time.monotonic(), targets)
        return targets

    async def _route(self, topic: str) -> TopicRouteData | None:
        for namesrv in self.namesrv_addrs:
            request = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic})
            try:
                response = await self.client.invoke(namesrv, request, SEND_TIMEOUT)
                if response.code == ResponseCode.SUCCESS:
                    return decode_body(TopicRouteData, response.body)
            except (RemotingError, ProtocolError) as e:
                log.info("no route of %s from %s: %s", topic, namesrv, e)
        return None
