"""Brokers of one group (a master and its slaves) in this process, sharing one real NameServer."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.broker.server import Broker
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer
from ferrymq.net import RemotingClient
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.remoting import RemotingCommand
from tests.broker.conftest import broker_config
from tests.broker.test_broker import send_ext


async def eventually(condition, timeout: float = 30.0, what: str = "condition") -> None:
    """Wait (bounded) until `condition()` is true."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def commitlog_bytes(broker: Broker) -> bytes:
    """The CommitLog's stored bytes, up to its max offset."""
    store = broker.store
    out, offset = [], store.commitlog.min_offset
    while offset < store.commitlog.max_offset:
        chunk = store.read_commitlog(offset, 1 << 30)
        out.append(bytes(chunk))
        offset += len(chunk)
    return b"".join(out)


async def caught_up(slave: Broker, master: Broker, timeout: float = 30.0) -> None:
    await eventually(
        lambda: slave.store.commitlog.max_offset == master.store.commitlog.max_offset,
        timeout,
        "the slave to catch up",
    )


class Group:
    def __init__(self, tmp_path, namesrv: NameServer, client: RemotingClient) -> None:
        self.tmp_path = tmp_path
        self.namesrv = namesrv
        self.client = client
        self.brokers: list[Broker] = []

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv.port}"

    async def start(self, name: str, **settings) -> Broker:
        """Start a broker whose store lives in tmp_path/<name> (the same name restarts on the same store)."""
        settings.setdefault("broker_name", "broker-a")
        broker = Broker(broker_config(self.tmp_path / name, self.namesrv.port, **settings))
        await broker.start()
        self.brokers.append(broker)
        return broker

    async def send(self, broker: Broker, body: bytes = b"m", *, topic: str = "T", queue_id: int = 0,
                   props: dict | None = None, timeout: float = 10.0) -> RemotingCommand:  # fmt: skip
        ext = {k: str(v) for k, v in send_ext(topic, queue_id, props).items()}
        request = RemotingCommand(RequestCode.SEND_MESSAGE, ext_fields=ext, body=body)
        return await self.client.invoke(broker.config.broker_addr, request, timeout)


@pytest.fixture
async def group(tmp_path):
    namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
    await namesrv.start()
    client = RemotingClient()
    g = Group(tmp_path, namesrv, client)
    yield g
    await client.close()
    for broker in reversed(g.brokers):
        if not broker.stopped:
            await broker.stop()
    await namesrv.stop()
