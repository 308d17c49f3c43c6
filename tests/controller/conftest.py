"""A real three-node controller group in this process (pysyncobj threads) on loopback ports."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.bench.processes import free_ports
from ferrymq.controller.config import ControllerConfig
from ferrymq.controller.server import Controller
from ferrymq.net import RemotingClient
from ferrymq.net.controllers import ControllerClient


async def wait_for(condition, timeout: float = 20.0, what: str = "condition"):
    """Poll ``condition()`` (sync or async) until truthy; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.05)


class Group:
    def __init__(self, tmp_path, size: int = 3, **settings) -> None:
        raft_ports = free_ports(size)
        self.peers = {f"n{i + 1}": f"127.0.0.1:{p}" for i, p in enumerate(raft_ports)}
        self.tmp_path = tmp_path
        self.settings = settings
        self.nodes: dict[str, Controller] = {}
        self.ports: dict[str, int] = {}

    async def start(self, node_id: str) -> Controller:
        config = ControllerConfig(
            node_id=node_id,
            peers=self.peers,
            data_dir=self.tmp_path / node_id,
            listen_host="127.0.0.1",
            listen_port=self.ports.get(node_id, 0),
            **self.settings,
        )
        node = Controller(config)
        await node.start()
        self.nodes[node_id] = node
        self.ports[node_id] = node.port
        return node

    async def stop(self, node_id: str) -> None:
        await self.nodes.pop(node_id).stop()

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports.values()]

    async def leader(self, timeout: float = 20.0) -> Controller:
        def one_leader():
            leaders = [n for n in self.nodes.values() if n.is_leader]
            return leaders[0] if len(leaders) == 1 else None

        return await wait_for(one_leader, timeout, "one controller leader")


@pytest.fixture
async def controller_group(tmp_path):
    groups: list[Group] = []

    async def make(size: int = 3, **settings) -> Group:
        group = Group(tmp_path, size, **settings)
        groups.append(group)
        for node_id in group.peers:
            await group.start(node_id)
        return group

    yield make
    for group in groups:
        for node_id in list(group.nodes):
            await group.stop(node_id)


@pytest.fixture
async def controller_client_factory():
    remotings: list[RemotingClient] = []

    def make(addresses: list[str]) -> ControllerClient:
        remoting = RemotingClient()
        remotings.append(remoting)
        return ControllerClient(addresses, remoting)

    yield make
    for remoting in remotings:
        await remoting.close()
