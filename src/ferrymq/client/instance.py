"""ClientInstance: what producers and consumers of one process share (RocketMQ's MQClientInstance).

One remoting client (one connection per broker), the topic routes from the NameServers refreshed
every 30 s (and at once when a send fails), and heartbeats that tell every broker which producer
and consumer groups live here.

Where the NameServers are, in RocketMQ's order of precedence: `namesrv_addr` ("host:port;host:port"),
else the address service at `ws_addr`, else the NAMESRV_ADDR environment variable, else the address
service of the ROCKETMQ_NAMESRV_DOMAIN (and ROCKETMQ_NAMESRV_DOMAIN_SUBGROUP) environment variables,
RocketMQ's rocketmq.namesrv.domain. An http(s):// URL given as `namesrv_addr` is taken as `ws_addr`.
A list from the address service is polled every `namesrv_poll_interval` s and followed when it changes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeAlias

from ferrymq.client.aio import outcome
from ferrymq.net import RemotingClient, RemotingError, nsaddr
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.net.tls import ClientTLS, client_context
from ferrymq.protocol.acl_signing import Credentials
from ferrymq.protocol.bodies import (
    ConsumerData,
    HeartbeatData,
    MessageQueue,
    ProducerData,
    TopicRouteData,
    decode_body,
    encode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.protocol.topic_names import AUTO_CREATE_TOPIC

log = logging.getLogger(__name__)

PERM_READ, PERM_WRITE = 4, 2
_instance_ids = itertools.count()

TLSOption: TypeAlias = bool | ClientTLS | ssl.SSLContext
"""``tls=`` of producers, consumers and admins: False (plaintext), True (TLS, servers checked against
the system's roots), ``ClientTLS(trust_cert_path="ca.pem", ...)`` or a ready ``ssl.SSLContext``."""


class ClientError(Exception):
    """A client call that cannot succeed: no route, refused by the broker, timed out."""


@dataclass(frozen=True)
class TopicRoute:
    """A topic's route turned into what clients use: queues and where their masters are."""

    data: TopicRouteData
    write_queues: tuple[MessageQueue, ...]
    read_queues: tuple[MessageQueue, ...]
    masters: dict[str, str]  # broker name -> master address

    @classmethod
    def build(cls, topic: str, data: TopicRouteData, cap_queues: int | None = None) -> TopicRoute:
        masters = {b.broker_name: b.broker_addrs[0] for b in data.broker_datas if 0 in b.broker_addrs}
        # Reads need any broker of the group (a slave serves them while its master is gone); writes a master.
        reachable = {b.broker_name for b in data.broker_datas if b.broker_addrs}
        write, read = [], []
        for q in sorted(data.queue_datas, key=lambda q: q.broker_name):
            if q.broker_name not in reachable:
                continue
            writes = q.write_queue_nums if cap_queues is None else min(q.write_queue_nums, cap_queues)
            if q.perm & PERM_WRITE and q.broker_name in masters:
                write += [
                    MessageQueue(topic=topic, broker_name=q.broker_name, queue_id=i) for i in range(writes)
                ]
            if q.perm & PERM_READ:
                read += [
                    MessageQueue(topic=topic, broker_name=q.broker_name, queue_id=i)
                    for i in range(q.read_queue_nums)
                ]
        return cls(data, tuple(write), tuple(read), masters)


def namesrv_source(
    namesrv_addr: str | None, given_ws_addr: str | None, environ: Mapping[str, str] = os.environ
) -> tuple[list[str], str | None]:
    """(fixed NameServer list, address service URL): one of them, by RocketMQ's precedence."""
    if namesrv_addr and namesrv_addr.strip().startswith(("http://", "https://")):
        return [], namesrv_addr.strip()
    if addrs := nsaddr.split_addrs(namesrv_addr):
        return addrs, None
    if given_ws_addr:
        return [], given_ws_addr
    if addrs := nsaddr.split_addrs(environ.get("NAMESRV_ADDR")):
        return addrs, None
    if domain := environ.get("ROCKETMQ_NAMESRV_DOMAIN"):
        subgroup = environ.get("ROCKETMQ_NAMESRV_DOMAIN_SUBGROUP") or nsaddr.DEFAULT_SUBGROUP
        return [], nsaddr.ws_addr(domain, subgroup)
    raise ValueError(
        "no NameServer: give namesrv_addr as host:port[;host:port], or an address service as ws_addr"
    )


class ClientInstance:
    def __init__(self, namesrv_addr: str | None, *, request_timeout: float = 3.0, route_refresh: float = 30.0,
                 heartbeat_interval: float = 30.0, tls: TLSOption = False, access_key: str | None = None,
                 secret_key: str | None = None, ws_addr: str | None = None,
                 namesrv_poll_interval: float = nsaddr.DEFAULT_POLL_INTERVAL) -> None:  # fmt: skip
        """``access_key``/``secret_key``: sign every request with them (RocketMQ's ACL session
        credentials), for servers with authentication on."""
        self.namesrvs, self.ws_addr = namesrv_source(namesrv_addr, ws_addr)
        self._namesrv_poll_interval = namesrv_poll_interval
        self.client_id = f"{_local_ip()}@{os.getpid()}#{next(_instance_ids)}"
        self.request_timeout = request_timeout
        credentials = Credentials(access_key or "", secret_key or "") if access_key or secret_key else None
        self.remoting = RemotingClient(
            tls=client_context(tls), signer=credentials.sign if credentials else None
        )
        # The broker id each queue's last pull answer suggested pulling from next (suggestWhichBrokerId).
        self.suggested_broker_ids: dict[MessageQueue, int] = {}
        self.routes: dict[str, TopicRoute] = {}
        self.producer_groups: set[str] = set()
        self.consumers: dict[str, Callable[[], ConsumerData]] = {}  # group -> its current heartbeat data
        self._route_refresh = route_refresh
        self._heartbeat_interval = heartbeat_interval
        self._tasks = BackgroundTasks(f"client instance {self.client_id}")
        self._refreshing: dict[str, asyncio.Task[TopicRoute | Exception]] = {}

    async def start(self) -> None:
        if self.ws_addr is not None:
            watcher = nsaddr.NameServerAddressWatcher(
                self.ws_addr, self._namesrvs_changed, self.request_timeout
            )
            await watcher.refresh()  # RocketMQ fetches once at start, then polls
            self._tasks.spawn(
                self._every(self._namesrv_poll_interval, watcher.refresh), name="NameServer list"
            )
        self._tasks.spawn(self._every(self._route_refresh, self.refresh_all_routes), name="route refresh")
        self._tasks.spawn(self._every(self._heartbeat_interval, self.heartbeat_all), name="heartbeats")

    async def close(self) -> None:
        """Stop the periodic work and route lookups, then close the connections; the instance may
        be started again."""
        await self._tasks.close()
        self._tasks = BackgroundTasks(f"client instance {self.client_id}")
        await self.remoting.close()

    def _namesrvs_changed(self, addrs: list[str]) -> None:
        self.namesrvs = addrs

    async def _every(self, period: float, job) -> None:
        while True:
            await asyncio.sleep(period)
            try:
                await job()
            except Exception:
                log.exception("periodic %s failed", getattr(job, "__name__", job))

    # --- routes ---------------------------------------------------------------------------------

    async def route(self, topic: str) -> TopicRoute:
        """The topic's route, fetched now if not cached; auto-creation's TBW102 route if it has none."""
        route = self.routes.get(topic)
        return route if route is not None else await self.refresh_route(topic)

    async def existing_route(self, topic: str) -> TopicRoute | None:
        """The topic's own route (cached as its route), or None while it has none: never the
        auto-create template's, whose queues do not exist for a topic that is only read."""
        data = await self._query_route(topic)
        if data is None:
            return None
        route = self.routes[topic] = TopicRoute.build(topic, data)
        return route

    async def refresh_route(self, topic: str) -> TopicRoute:
        """Ask the NameServers again (concurrent callers share one request; one caller cancelled
        does not cancel it for the others)."""
        task = self._refreshing.get(topic)
        if task is None:
            task = self._tasks.spawn(outcome(self._fetch_route(topic)), name=f"route of {topic}")
            self._refreshing[topic] = task
            task.add_done_callback(lambda _: self._refreshing.pop(topic, None))
        route = await asyncio.shield(task)
        if isinstance(route, Exception):
            raise route
        return route

    async def _fetch_route(self, topic: str) -> TopicRoute:
        data = await self._query_route(topic)
        if data is not None:
            route = TopicRoute.build(topic, data)
        else:
            template = await self._query_route(AUTO_CREATE_TOPIC)
            if template is None:
                raise ClientError(f"no route for topic {topic} and no auto-create route {AUTO_CREATE_TOPIC}")
            route = TopicRoute.build(topic, template, cap_queues=4)  # the broker creates it on first send
        self.routes[topic] = route
        return route

    async def _query_route(self, topic: str) -> TopicRouteData | None:
        if not self.namesrvs:
            raise ClientError(
                f"cannot get the route of {topic}: no NameServer known yet (from {self.ws_addr})"
            )
        errors = []
        for addr in random.sample(self.namesrvs, len(self.namesrvs)):
            request = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic})
            try:
                response = await self.remoting.invoke(addr, request, self.request_timeout)
            except RemotingError as e:
                errors.append(f"{addr}: {e}")
                continue
            if response.code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            if response.code != ResponseCode.SUCCESS:
                errors.append(f"{addr}: {response.remark}")
                continue
            return decode_body(TopicRouteData, response.body)
        raise ClientError(f"cannot get the route of {topic}: " + "; ".join(errors))

    async def refresh_all_routes(self) -> None:
        for topic in list(self.routes):
            try:
                await self.refresh_route(topic)
            except ClientError as e:
                log.warning("%s", e)

    def broker_addrs(self) -> set[str]:
        return {addr for route in self.routes.values() for addr in route.masters.values()}

    # --- heartbeats -----------------------------------------------------------------------------

    def heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(
            client_id=self.client_id,
            producer_data_set=[ProducerData(group_name=g) for g in sorted(self.producer_groups)],
            consumer_data_set=[make() for make in self.consumers.values()],
        )

    async def heartbeat_all(self) -> None:
        """Tell every known broker about this process's groups."""
        body = encode_body(self.heartbeat_data())
        for addr in self.broker_addrs():
            await self.heartbeat(addr, body)

    async def heartbeat(self, addr: str, body: bytes | None = None) -> None:
        body = body if body is not None else encode_body(self.heartbeat_data())
        try:
            response = await self.remoting.invoke(addr, RemotingCommand(RequestCode.HEART_BEAT, body=body),
                                                  self.request_timeout)  # fmt: skip
            if response.code != ResponseCode.SUCCESS:
                log.warning("heartbeat to %s refused: %s", addr, response.remark)
        except RemotingError as e:
            log.warning("heartbeat to %s failed: %s", addr, e)

    def invoke(
        self, addr: str, request: RemotingCommand, timeout: float | None = None
    ) -> Awaitable[RemotingCommand]:
        """A request to `addr` (`request_timeout` unless `timeout`); await what this returns."""
        return self.remoting.call(addr, request, timeout or self.request_timeout)


def _local_ip() -> str:
    """This host's address for client ids (as the Java client shows it), loopback if unknown."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
