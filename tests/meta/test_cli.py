"""`ferrymq meta` as its own process: it creates its SQLite store in the data dir, imports a
definitions file, and serves the HTTP API a client reaches."""

from ferrymq.bench.processes import free_ports
from ferrymq.meta.client import MetaClient
from tests.compat.conftest import ServerProcess
from tests.meta.test_definitions import SAMPLE


async def test_serves_what_it_imported(tmp_path):
    (port,) = free_ports(1)
    data_dir = tmp_path / "meta"
    args = ["--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}", "--import", str(SAMPLE)]
    server = ServerProcess("meta", args, tmp_path)
    try:
        server.wait_listening(f"127.0.0.1:{port}")
        async with MetaClient(f"127.0.0.1:{port}") as client:
            snap = await client.snapshot("shop")
            assert sorted(q.name for q in snap.queues) == ["orders.created", "orders.dead"]
            assert (await client.authenticate("guest", "guest")) is not None
    finally:
        server.stop()
    assert (data_dir / "meta.db").exists()
    assert "queues: 2 created" in server.log.read_text()
