"""A console over a real NameServer and broker in this process, and HTTP calls to it."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from ferrymq.client import Message, Producer
from ferrymq.console.app import ConsoleServer
from ferrymq.console.cluster import ClusterData, Metadata
from ferrymq.protocol.codes import RequestCode
from tests.auth.conftest import ROOT, SecureCluster, make_secure  # noqa: F401  (a fixture, used here)
from tests.broker.conftest import Cluster, make_cluster  # noqa: F401  (a fixture, used by the tests here)


class Console:
    """A started ConsoleServer and a session to call its API with."""

    def __init__(self, server: ConsoleServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    async def call(self, method: str, path: str, body: Any = None, **query: Any) -> tuple[int, Any]:
        """(status, decoded JSON) of one API call."""
        params = {k: str(v) for k, v in query.items()}
        async with self.session.request(method, self.url + path, json=body, params=params) as response:
            return response.status, await response.json()

    async def get(self, path: str, **query: Any) -> Any:
        status, value = await self.call("GET", path, **query)
        assert status == 200, value
        return value

    async def post(self, path: str, body: Any = None) -> Any:
        status, value = await self.call("POST", path, body or {})
        assert status in (200, 201), value
        return value


@pytest.fixture
async def open_console():
    """open_console(namesrv, metadata=None, **options) → a Console on a free port (closed at the
    end); `options`: ClusterData's access_key, secret_key and proxies."""
    opened: list[Console] = []

    async def start(namesrv: str, metadata: Metadata | None = None, **options: str) -> Console:
        server = ConsoleServer(ClusterData(namesrv, metadata=metadata, **options), "127.0.0.1", 0)
        await server.start()
        console = Console(server, aiohttp.ClientSession())
        opened.append(console)
        return console

    yield start
    for console in opened:
        await console.session.close()
        await console.server.close()


@pytest.fixture
async def cluster_console(make_cluster, open_console) -> tuple[Cluster, Console]:  # noqa: F811
    cluster = await make_cluster()
    return cluster, await open_console(cluster.namesrv_addr)


@pytest.fixture
async def secure_console(make_secure, open_console) -> tuple[SecureCluster, Console]:  # noqa: F811
    """A NameServer and broker with authentication on, and a console acting as their super user."""
    cluster = await make_secure()
    return cluster, await open_console(cluster.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1])


async def commit(cluster: Cluster, group: str, topic: str, queue_id: int, offset: int) -> None:
    """Commit `group`'s offset on a queue as a consumer would."""
    ext = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset}
    response = await cluster.call(RequestCode.UPDATE_CONSUMER_OFFSET, ext)
    assert response.code == 0, response.remark


async def send_as(namesrv: str, user: str, password: str, topic: str) -> None:
    """Send one message to `topic` signed as `user` (ClientError when the broker refuses it)."""
    async with Producer("AclProbe", namesrv, access_key=user, secret_key=password) as producer:
        await producer.send(Message(topic, b"probe"))
