"""The metrics HTTP server: its three paths, keep-alive, readiness reasons, and bad requests."""

from __future__ import annotations

import asyncio

from prometheus_client.core import GaugeMetricFamily

from ferrymq.metrics.registry import Registry
from tests.metrics.conftest import http_get, value


class Fixed:
    """A collector of one gauge sample, as a role's collector would yield."""

    def __init__(self, name: str, node: str, number: float) -> None:
        self.name, self.node, self.number = name, node, number

    def collect(self):
        family = GaugeMetricFamily(self.name, "a test gauge", labels=["node_id"])
        family.add_metric([self.node], self.number)
        yield family


class Broken:
    def collect(self):
        raise RuntimeError("a collector bug")


async def test_metrics_merges_families_of_the_same_name_and_survives_a_broken_collector(serve):
    registry = Registry()
    registry.add(Fixed("ferrymq_test_gauge", "a", 1))
    registry.add(Broken())
    registry.add(Fixed("ferrymq_test_gauge", "b", 2))
    scraper = await serve(registry)
    text = await scraper.metrics()
    assert text.count("# TYPE ferrymq_test_gauge gauge") == 1
    assert value(text, "ferrymq_test_gauge", node_id="a") == 1
    assert value(text, "ferrymq_test_gauge", node_id="b") == 2


async def test_readiness_gives_every_reason_and_stopping_overrides_them(serve):
    registry = Registry()
    problems = ["store recovering"]
    registry.add(Fixed("ferrymq_test_gauge", "a", 1), lambda: problems[0] if problems else None)
    registry.add(
        Fixed("ferrymq_test_gauge", "b", 1), lambda: str(1 / (len(problems) - 1)) if problems else None
    )
    scraper = await serve(registry)
    status, body = await scraper.ready()
    assert status == 503
    assert "store recovering" in body and "ZeroDivisionError" in body
    assert await http_get(scraper.base + "/health/live") == (200, "live\n")
    problems.clear()
    assert await scraper.ready() == (200, "ready\n")
    registry.stopping = True
    assert await scraper.ready() == (503, "not ready: stopping\n")


async def raw(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        async with asyncio.timeout(10):
            return await reader.read()  # until the server closes
    finally:
        writer.close()


async def test_keep_alive_head_and_errors(serve):
    scraper = await serve(Registry())
    port = scraper.server.port
    two = await raw(
        port,
        b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n"
        b"HEAD /health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    assert two.count(b"HTTP/1.1 200 OK") == 2
    assert two.endswith(b"Connection: close\r\n\r\n")  # HEAD: no body
    assert (await raw(port, b"POST /metrics HTTP/1.0\r\n\r\n")).startswith(b"HTTP/1.1 405")
    assert (await raw(port, b"GET /other HTTP/1.0\r\n\r\n")).startswith(b"HTTP/1.1 404")
    assert (await raw(port, b"garbage\r\n\r\n")).startswith(b"HTTP/1.1 400")
    assert await raw(port, b"GET /" + b"x" * 20000 + b" HTTP/1.1\r\n\r\n") == b""  # too long: closed
    assert await http_get(scraper.base + "/health/live") == (200, "live\n")  # still serving
