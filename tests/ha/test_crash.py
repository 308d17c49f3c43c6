"""SIGKILL a SYNC_MASTER under load: every send it acknowledged is on the slave."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer
from ferrymq.net import RemotingClient, RemotingError
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.store import MessageStore
from tests.broker.test_broker import send_ext
from tests.store.conftest import read_queue, small_config

pytestmark = pytest.mark.crash

SMALL_STORE = {
    "FERRYMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(1 << 20),
    "FERRYMQ_MAPPED_FILE_SIZE_CONSUME_QUEUE": str(1000 * 20),
    "FERRYMQ_MAX_HASH_SLOT_NUM": "1024",
    "FERRYMQ_MAX_INDEX_NUM": "10000",
}


async def start_broker(store_dir, namesrv_port: int, *args: str) -> tuple[subprocess.Popen, str]:
    """A `ferrymq broker` process; returns it and its client address once it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferrymq", "broker", "--namesrv", f"127.0.0.1:{namesrv_port}",
         "--listen", "127.0.0.1:0", "--ha-port", "0", "--store-dir", str(store_dir), *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, **SMALL_STORE},
    )  # fmt: skip
    # In a thread: the NameServer in this process must answer the broker's registration meanwhile.
    line = await asyncio.to_thread(proc.stdout.readline)  # the banner comes once it listens
    match = re.search(r"listening on (\S+),", line)
    if match is None:
        proc.kill()
        raise AssertionError(f"broker did not start: {line!r}")
    return proc, match.group(1)


async def send(client: RemotingClient, addr: str, key: str) -> int:
    ext = {k: str(v) for k, v in send_ext("T", int(key) % 4, {"UNIQ_KEY": key}).items()}
    request = RemotingCommand(RequestCode.SEND_MESSAGE, ext_fields=ext, body=key.encode())
    try:
        return (await client.invoke(addr, request, 5.0)).code
    except RemotingError:
        return -1


async def test_sigkill_of_a_sync_master_loses_no_acknowledged_message(tmp_path):
    namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
    await namesrv.start()
    client = RemotingClient()
    master, master_addr = await start_broker(tmp_path / "m", namesrv.port, "--role", "SYNC_MASTER")
    slave, _ = await start_broker(tmp_path / "s", namesrv.port, "--role", "SLAVE", "--broker-id", "1")
    acked: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while await send(client, master_addr, "0") != ResponseCode.SUCCESS:  # until the slave is attached
            assert time.monotonic() < deadline, "the slave never attached"
            await asyncio.sleep(0.05)
        acked.append("0")
        counter = iter(range(1, 1_000_000))
        killed = asyncio.Event()

        async def producer() -> None:
            while not killed.is_set():
                key = str(next(counter))
                if await send(client, master_addr, key) == ResponseCode.SUCCESS:
                    acked.append(key)

        producers = [asyncio.ensure_future(producer()) for _ in range(8)]
        deadline = time.monotonic() + 60
        while len(acked) < 400 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        master.send_signal(signal.SIGKILL)  # sends are in flight
        master.wait(10)
        killed.set()
        await asyncio.wait_for(asyncio.gather(*producers), 30)
        assert len(acked) >= 400
        slave.send_signal(signal.SIGTERM)
        slave.wait(30)
    finally:
        for proc in (master, slave):
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        await client.close()
        await namesrv.stop()

    sizes = {"mapped_file_size_commit_log": 1 << 20, "mapped_file_size_consume_queue": 1000 * 20}
    store = MessageStore(
        small_config(tmp_path / "s", max_hash_slot_num=1024, max_index_num=10000, **sizes)
    ).open()
    try:
        assert store.wait_dispatched()
        stored = {m.body.decode() for q in range(4) for m in read_queue(store, "T", q)}
    finally:
        store.close()
    missing = set(acked) - stored
    assert not missing, f"{len(missing)} acknowledged messages are not on the slave: {sorted(missing)[:10]}"
