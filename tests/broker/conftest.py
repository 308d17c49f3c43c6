"""A real NameServer and Broker in this process on loopback ports, and a real remoting client."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.server import Broker
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer
from ferrymq.net import RemotingClient
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.store import StoreConfig


def broker_config(tmp_path, namesrv_port: int, **settings) -> BrokerConfig:
    store = StoreConfig(
        store_path_root_dir=settings.pop("store_path_root_dir", tmp_path / "store"),
        mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=1000 * 20,
        max_hash_slot_num=1024,
        max_index_num=10_000,
        **{k: settings.pop(k) for k in list(settings) if hasattr(StoreConfig, k)},
    )
    return BrokerConfig(
        namesrv_addr=f"127.0.0.1:{namesrv_port}",
        listen_host="127.0.0.1",
        listen_port=settings.pop("listen_port", 0),
        ha_listen_port=settings.pop("ha_listen_port", 0),
        store=store,
        **settings,
    )


class Cluster:
    """The servers plus helpers that speak to them like a client would."""

    def __init__(self, namesrv: NameServer, broker: Broker, client: RemotingClient) -> None:
        self.namesrv = namesrv
        self.broker = broker
        self.client = client

    @property
    def broker_addr(self) -> str:
        return self.broker.config.broker_addr

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv.port}"

    async def settled(self) -> None:
        """Wait until everything sent is dispatched to ConsumeQueues (the dispatcher is a thread)."""
        assert await asyncio.to_thread(self.broker.store.wait_dispatched)

    async def call(self, code: int, ext: dict | None = None, body: bytes = b"", *, to: str | None = None,
                   timeout: float = 5.0) -> RemotingCommand:  # fmt: skip
        request = RemotingCommand(code, ext_fields={k: str(v) for k, v in (ext or {}).items()}, body=body)
        return await self.client.invoke(to or self.broker_addr, request, timeout)


@pytest.fixture
async def make_cluster(tmp_path):
    """Start (or restart) a cluster; every one started is stopped at the end."""
    started: list[tuple[NameServer, Broker, RemotingClient]] = []

    async def start(namesrv: NameServer | None = None, **settings) -> Cluster:
        if namesrv is None:
            namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
            await namesrv.start()
        broker = Broker(broker_config(tmp_path, namesrv.port, **settings))
        await broker.start()
        client = RemotingClient()
        started.append((namesrv, broker, client))
        return Cluster(namesrv, broker, client)

    yield start
    for _, broker, client in reversed(started):
        await client.close()
        if not broker.stopped:
            await broker.stop()
    for namesrv in dict.fromkeys(n for n, _, _ in started):
        await namesrv.stop()


@pytest.fixture
async def cluster(make_cluster) -> Cluster:
    return await make_cluster()
