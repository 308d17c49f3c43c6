"""Scraping a real MetricsServer over HTTP, and reading samples out of the exposition text."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ferrymq.metrics.http import MetricsServer
from ferrymq.metrics.registry import Registry
from tests.broker.conftest import make_cluster  # noqa: F401  (a fixture, used by the tests here)
from tests.ha.conftest import group  # noqa: F401


async def http_get(url: str) -> tuple[int, str]:
    """(status, body) of a GET, 4xx and 5xx included; status 0 when nothing answers (yet)."""

    def fetch() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except (urllib.error.URLError, ConnectionError) as error:
            return 0, str(error)

    return await asyncio.to_thread(fetch)


def value(text: str, name: str, **labels: str) -> float | None:
    """The sum of the samples called `name` whose labels include `labels`; None if there is none."""
    found = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    return sum(found) if found else None


class Scraper:
    def __init__(self, server: MetricsServer) -> None:
        self.server = server

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    async def metrics(self) -> str:
        status, text = await http_get(self.base + "/metrics")
        assert status == 200
        return text

    async def value(self, name: str, **labels: str) -> float | None:
        return value(await self.metrics(), name, **labels)

    async def ready(self) -> tuple[int, str]:
        return await http_get(self.base + "/health/ready")


@pytest.fixture
async def serve():
    """serve(registry) → a Scraper of a MetricsServer on a free loopback port (closed at the end)."""
    servers: list[MetricsServer] = []

    async def start(registry: Registry) -> Scraper:
        server = MetricsServer(registry, "127.0.0.1", 0)
        await server.start()
        servers.append(server)
        return Scraper(server)

    yield start
    for server in servers:
        await server.close()


async def eventually(condition, timeout: float = 20.0, what: str = "condition"):
    """Await `condition()` (a coroutine function) until it is truthy; fail after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = await condition()
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.05)
