"""SIGKILL a broker process while delayed and timed messages are pending or being delivered: after a
restart every acknowledged message arrives, none before its time, and none twice: the progress saved
before the kill may miss the last redeliveries, but they are in the log, which names what each one
redelivered (RocketMQ delivers those again: at least once)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from ferrymq.client import Message, Producer
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer

from .conftest import collect

COUNT = 60  # of each kind


async def start_broker(store_dir, namesrv_port: int) -> subprocess.Popen:
    env = {
        **os.environ,
        "FERRYMQ_MESSAGE_DELAY_LEVEL": "1s 3s",
        "FERRYMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(4 << 20),
        "FERRYMQ_MAPPED_FILE_SIZE_CONSUME_QUEUE": str(1000 * 20),
        "FERRYMQ_MESSAGE_INDEX_ENABLE": "false",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferrymq", "broker", "--listen", "127.0.0.1:0", "--store-dir", str(store_dir),
         "--namesrv", f"127.0.0.1:{namesrv_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = await asyncio.to_thread(proc.stdout.readline)
        lines.append(line)
        if not line or line.startswith("Broker "):
            break
    if not lines[-1].startswith("Broker "):
        proc.kill()
        raise AssertionError("broker did not start:\n" + "".join(lines))
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep its log from filling the pipe
    return proc


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.crash
async def test_pending_scheduled_messages_survive_sigkill(tmp_path):
    namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
    await namesrv.start()
    addr = f"127.0.0.1:{namesrv.port}"
    store = tmp_path / "store"
    broker = await start_broker(store, namesrv.port)
    due: dict[bytes, float] = {}  # body -> earliest time it may arrive
    try:
        async with Producer("crash-producer", addr) as producer:
            await producer.send(Message("Crashed", b"first"))
            for i in range(COUNT):
                start = time.time()
                await producer.send(Message("Crashed", b"d%d" % i, delay_level=2))
                due[b"d%d" % i] = start + 3
                at = int((start + 1 + i * 4 / COUNT) * 1000)  # spread over 1..5 s from now
                await producer.send(Message("Crashed", b"t%d" % i, properties={"TIMER_DELIVER_MS": str(at)}))
                due[b"t%d" % i] = at / 1000
        await asyncio.sleep(2.5)  # some timers are delivered, the rest pending, when the broker dies
        kill(broker)
        broker = await start_broker(store, namesrv.port)
        got = await collect(addr, "Crashed", 2 * COUNT + 1, timeout=60)
    finally:
        broker.kill()
        broker.wait()
        await namesrv.stop()
    counts = Counter(m.body for _, m in got)
    assert set(due) <= set(counts), f"lost: {sorted(set(due) - set(counts))}"
    for _, m in got:
        if m.body in due:
            assert m.store_timestamp / 1000 >= due[m.body] - 0.05, f"{m.body} delivered early"
    twice = {body for body, n in counts.items() if n > 1 and body != b"first"}
    assert not twice, f"delivered twice: {sorted(twice)}"
