"""A NameServer and a broker with authentication on, in this process on loopback ports, whose first
super user is ``root``; clients that sign as whoever a test says."""

from __future__ import annotations

import pytest

from ferrymq.broker.server import Broker
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer
from ferrymq.net import RemotingClient
from ferrymq.protocol.acl_signing import Credentials
from ferrymq.protocol.remoting import RemotingCommand
from tests.broker.conftest import broker_config

ROOT = ("root", "root-secret")


class SecureCluster:
    def __init__(self, namesrv: NameServer, broker: Broker) -> None:
        self.namesrv = namesrv
        self.broker = broker
        self._clients: list[RemotingClient] = []

    @property
    def broker_addr(self) -> str:
        return self.broker.config.broker_addr

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv.port}"

    def client(self, access_key: str | None = None, secret_key: str | None = None) -> RemotingClient:
        signer = Credentials(access_key, secret_key or "").sign if access_key else None
        client = RemotingClient(signer=signer)
        self._clients.append(client)
        return client

    async def call(self, client: RemotingClient, code: int, ext: dict | None = None, body: bytes = b"",
                   *, to: str | None = None) -> RemotingCommand:  # fmt: skip
        request = RemotingCommand(code, ext_fields={k: str(v) for k, v in (ext or {}).items()}, body=body)
        return await client.invoke(to or self.broker_addr, request, 5.0)

    async def close_clients(self) -> None:
        for client in self._clients:
            await client.close()


@pytest.fixture
async def make_secure(tmp_path):
    """Start (or restart, on the same store) a secured NameServer + broker."""
    started: list[SecureCluster] = []

    async def start(**settings) -> SecureCluster:
        namesrv = NameServer(
            NamesrvConfig(
                listen_host="127.0.0.1", listen_port=0, auth_enabled=True, init_username=ROOT[0],
                init_password=ROOT[1], auth_path=tmp_path / "namesrv-auth.json",
            )
        )  # fmt: skip
        await namesrv.start()
        settings = {"auth_enabled": True, "init_username": ROOT[0], "init_password": ROOT[1]} | settings
        broker = Broker(broker_config(tmp_path, namesrv.port, **settings))
        await broker.start()
        cluster = SecureCluster(namesrv, broker)
        started.append(cluster)
        return cluster

    yield start
    for cluster in reversed(started):
        await cluster.close_clients()
        if not cluster.broker.stopped:
            await cluster.broker.stop()
        await cluster.namesrv.stop()


@pytest.fixture
async def secure(make_secure) -> SecureCluster:
    return await make_secure()
