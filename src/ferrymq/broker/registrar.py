"""Registration with every NameServer: at start, every `register_name_server_period`, on topic
changes, and an unregistration at stop. A NameServer that is down is retried next period. Without a
configured list, the list comes from the address service (`fetch_namesrv_addr_by_address_server`),
and a new list is registered with at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

import msgspec

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.topics import PERM_READ, PERM_WRITE, TopicConfigManager
from ferrymq.net import RemotingClient, RemotingError
from ferrymq.net.nsaddr import NameServerAddressWatcher, ws_addr
from ferrymq.protocol.bodies import RegisterBrokerBody, TopicConfigSerializeWrapper, encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import (
    BrokerRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
)
from ferrymq.protocol.record import body_crc
from ferrymq.protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)


class RegisteredRole(Protocol):
    """The broker's role as NameServers list it (it changes while the broker runs)."""

    @property
    def epoch(self) -> int: ...

    @property
    def registered_id(self) -> int: ...


class NameServerRegistrar:
    def __init__(
        self, config: BrokerConfig, topics: TopicConfigManager, role: RegisteredRole, client: RemotingClient,
        master_ha_addr_learned: Callable[[str], None],
    ) -> None:  # fmt: skip
        """`master_ha_addr_learned(addr)`: a NameServer named the group master's HA address."""
        self.config = config
        self.topics = topics
        self.role = role
        self.client = client
        self._master_ha_addr_learned = master_ha_addr_learned
        self.master_addr: str | None = None
        self._failing: set[str] = set()
        self.registered: set[str] = set()  # NameServers whose last registration succeeded (readiness)
        self.address_service = (
            NameServerAddressWatcher(
                ws_addr(config.rmq_address_server_domain, config.rmq_address_server_sub_group),
                self._namesrvs_changed,
            )
            if config.fetch_namesrv_addr_by_address_server and not config.namesrv_addrs
            else None
        )

    async def follow_address_service(self) -> None:
        """Fetch the NameServer list (if it comes from the address service); register with a new one."""
        if self.address_service is not None and await self.address_service.refresh():
            await self.register_all()

    def _namesrvs_changed(self, addrs: list[str]) -> None:
        self.config.namesrv_addr = ";".join(addrs)
        self.registered &= set(addrs)
        self._failing &= set(addrs)

    async def register_all(self) -> None:
        config = self.config
        if config.enable_controller_mode and not self.role.epoch:
            return  # no role from the controller yet: not a master, not a slave of anyone
        body = encode_body(RegisterBrokerBody(topic_config_serialize_wrapper=self._published_topics()))
        header = RegisterBrokerRequestHeader(
            broker_name=config.broker_name,
            broker_addr=config.broker_addr,
            cluster_name=config.broker_cluster_name,
            broker_id=self.role.registered_id,
            ha_server_addr=config.ha_addr,
            enable_acting_master=config.enable_slave_acting_master or None,
            body_crc32=body_crc(body),
        )
        ext = header.to_ext_fields()
        await asyncio.gather(*(self._register(addr, ext, body) for addr in config.namesrv_addrs))

    def _published_topics(self) -> TopicConfigSerializeWrapper:
        """The topic table; on a broker that is not both readable and writable, every topic takes the
        broker's permission, so routes send producers (or consumers) elsewhere (as RocketMQ does)."""
        wrapper = self.topics.wrapper()
        perm = self.config.broker_permission
        if perm & (PERM_READ | PERM_WRITE) != PERM_READ | PERM_WRITE:
            wrapper.topic_config_table = {
                name: msgspec.structs.replace(tc, perm=perm)
                for name, tc in wrapper.topic_config_table.items()
            }
        return wrapper

    async def _register(self, addr: str, ext: dict[str, str], body: bytes) -> None:
        request = RemotingCommand(RequestCode.REGISTER_BROKER, ext_fields=dict(ext), body=body)
        try:
            response = await self.client.invoke(addr, request, timeout=6.0)
        except RemotingError as e:
            if addr not in self._failing:
                log.warning("cannot register with NameServer %s: %s (will retry)", addr, e)
            self._failing.add(addr)
            self.registered.discard(addr)
            return
        if response.code != ResponseCode.SUCCESS:
            log.warning("NameServer %s refused registration: %s", addr, response.remark)
            return
        if addr in self._failing:
            log.info("registered with NameServer %s again", addr)
        self._failing.discard(addr)
        self.registered.add(addr)
        answer = RegisterBrokerResponseHeader.from_ext_fields(response.ext_fields)
        if answer.master_addr:
            self.master_addr = answer.master_addr
        if answer.ha_server_addr and not self.config.ha_master_address:  # a configured one wins (RocketMQ)
            self._master_ha_addr_learned(answer.ha_server_addr)

    async def unregister_all(self) -> None:
        config = self.config
        ext = BrokerRequestHeader(
            broker_name=config.broker_name,
            broker_addr=config.broker_addr,
            cluster_name=config.broker_cluster_name,
            broker_id=self.role.registered_id,
        ).to_ext_fields()
        for addr in config.namesrv_addrs:
            try:
                await self.client.invoke(
                    addr, RemotingCommand(RequestCode.UNREGISTER_BROKER, ext_fields=dict(ext)), 3.0
                )
            except RemotingError as e:
                log.warning("cannot unregister from NameServer %s: %s", addr, e)
