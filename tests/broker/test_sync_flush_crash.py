"""SIGKILL a SYNC_FLUSH broker process while SDK producers send to it, drop every CommitLog byte no
fdatasync covered (as a power loss would; tests/durable_log.c tells which), restart it on the same store:
every acknowledged send must come back, at its queue offset and with its body.

This is the broker's own group commit (on its event loop) under a real crash: concurrent single sends
(whose syncs group) and a few batches, small CommitLog segments so that syncs span files. Rounds run on
one store, so each recovery starts from what the previous ones left. Set FERRYMQ_SYNC_CRASH_ROUNDS and
FERRYMQ_SYNC_CRASH_SEED to run longer or other schedules.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

import pytest

from ferrymq.bench.processes import Proc, free_port
from ferrymq.client import Admin, Message, Producer
from ferrymq.client.message import MessageQueue
from ferrymq.client.pull import pull
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer

from ..durable import build_durable_log, lose_unsynced, preload_env

ROUNDS = int(os.environ.get("FERRYMQ_SYNC_CRASH_ROUNDS", "4"))
SEED = int(os.environ.get("FERRYMQ_SYNC_CRASH_SEED", "20261201"))
TOPIC = "SyncCrash"
QUEUES = 4
SENDERS = 24  # single sends in flight at once
MAX_SECONDS_PER_ROUND = 20
MAX_ROUNDS = ROUNDS * 3  # past ROUNDS only until a kill found unsynced bytes (a slow client idles the broker)

Ack = tuple[MessageQueue, int, str, str]  # queue, queue offset, offset message id, key (the body's seed)


def body_of(key: str) -> bytes:
    """The body every message with this key must have, byte for byte."""
    rnd = random.Random(key)
    return key.encode() + b":" + rnd.randbytes(rnd.randint(10, 2000))


@pytest.fixture(scope="module")
def durable_log_so(tmp_path_factory) -> Path:
    return build_durable_log(tmp_path_factory.mktemp("durable"))


def broker(tmp_path, port: int, namesrv: int, durable_log_so: Path) -> Proc:
    env = {
        **preload_env(durable_log_so, tmp_path / "durable.log"),
        "FERRYMQ_FLUSH_DISK_TYPE": "SYNC_FLUSH",
        "FERRYMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(256 * 1024),  # syncs that span segments
    }
    args = ["broker", "--namesrv", f"127.0.0.1:{namesrv}", "--listen", f"127.0.0.1:{port}",
            "--store-dir", str(tmp_path / "store"), "--ha-port", "0"]  # fmt: skip
    return Proc("broker", args, tmp_path, env, [])


class Load:
    """Senders that record every acknowledged send, until cancelled (failures are retried later)."""

    def __init__(self, producer: Producer, round_no: int) -> None:
        self.producer = producer
        self.round_no = round_no
        self.acks: list[Ack] = []

    def record(self, keys: list[str], result) -> None:
        for i, (key, offset_id) in enumerate(zip(keys, result.offset_msg_id.split(","), strict=True)):
            self.acks.append((result.message_queue, result.queue_offset + i, offset_id, key))

    async def single(self, sender: int) -> None:
        for seq in range(1_000_000):
            key = f"r{self.round_no}-s{sender}-{seq}"
            try:
                result = await self.producer.send(Message(TOPIC, body_of(key), keys=key))
            except Exception:
                await asyncio.sleep(0.01)
                continue
            self.record([key], result)

    async def batches(self, rnd: random.Random) -> None:
        for seq in range(1_000_000):
            keys = [f"r{self.round_no}-b{seq}-{i}" for i in range(rnd.randint(2, 8))]
            try:
                result = await self.producer.send_batch([Message(TOPIC, body_of(k), keys=k) for k in keys])
            except Exception:
                await asyncio.sleep(0.01)
                continue
            self.record(keys, result)
            await asyncio.sleep(0.005)


async def check_readable(admin: Admin, producer: Producer, addr: str, acked: list[Ack]) -> None:
    """Every ack is in its queue at its offset with its body, and found again by its offset id."""
    by_queue: dict[MessageQueue, dict[int, str]] = {}
    for mq, offset, _, key in acked:
        assert by_queue.setdefault(mq, {}).setdefault(offset, key) == key, f"two acks at {mq} {offset}"
    for mq, wanted in by_queue.items():
        stored: dict[int, tuple[str, bytes]] = {}
        offset, end = 0, max(wanted) + 1
        while offset < end:
            result = await pull(producer.instance, addr, mq, "SyncCrashCheck", offset, max_messages=32)
            assert result.messages, f"queue {mq.queue_id} ends at {offset}, acks go up to {end - 1}"
            for m in result.messages:
                stored[m.queue_offset] = (m.keys[0], m.body)
            offset = result.next_begin_offset
        lost = [(o, k) for o, k in wanted.items() if stored.get(o, ("",))[0] != k]
        assert not lost, f"queue {mq.queue_id}: {len(lost)} acknowledged sends lost, e.g. {lost[:5]}"
        changed = [k for o, k in wanted.items() if stored[o][1] != body_of(k)]
        assert not changed, f"queue {mq.queue_id}: bodies changed on disk, e.g. {changed[:5]}"
    sample = random.Random(SEED).sample(acked, min(len(acked), 300))
    for at in range(0, len(sample), 50):
        chunk = sample[at : at + 50]
        found = await asyncio.gather(*(admin.view_message(offset_id) for _, _, offset_id, _ in chunk))
        for (mq, offset, _, key), m in zip(chunk, found, strict=True):
            assert (m.queue_id, m.queue_offset, m.keys[0], m.body) == (mq.queue_id, offset, key, body_of(key))


@pytest.mark.crash
async def test_every_acknowledged_send_survives_a_sigkilled_broker(tmp_path, durable_log_so):
    rnd = random.Random(SEED)
    namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
    await namesrv.start()
    port = free_port()
    addr = f"127.0.0.1:{port}"
    proc = broker(tmp_path, port, namesrv.port, durable_log_so)
    namesrv_addr = f"127.0.0.1:{namesrv.port}"
    producer = Producer("SyncCrashP", namesrv_addr, send_timeout=2, retry_times_when_send_failed=0)
    admin = Admin(namesrv_addr)
    acked: list[Ack] = []
    dropped = 0
    try:
        proc.start()
        await proc.wait_for_line("listening on", 60)
        await admin.create_topic(TOPIC, QUEUES)
        await producer.start()
        for round_no in range(MAX_ROUNDS):
            if round_no >= ROUNDS and dropped:
                break
            load = Load(producer, round_no)
            senders = [asyncio.create_task(load.single(i)) for i in range(SENDERS)]
            senders.append(asyncio.create_task(load.batches(rnd)))
            want = rnd.randint(300, 3000)
            deadline = time.monotonic() + MAX_SECONDS_PER_ROUND
            while len(load.acks) < want and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
            await asyncio.sleep(rnd.random() * 0.005)
            since = len(proc.log_text())
            proc.kill()  # the senders still wait for answers: what was not acknowledged may be lost
            for task in senders:
                task.cancel()
            await asyncio.gather(*senders, return_exceptions=True)
            assert len(load.acks) >= want, (
                f"round {round_no}: {len(load.acks)} acks in {MAX_SECONDS_PER_ROUND} s"
            )
            acked += load.acks
            dropped += lose_unsynced(tmp_path / "store" / "commitlog", tmp_path / "durable.log")
            proc.start()
            await proc.wait_for_line("listening on", 60, since=since)
            await check_readable(admin, producer, addr, acked)
        assert len(acked) > ROUNDS * 300
        assert dropped, "no kill found unsynced bytes to drop: the rounds tested little"
    finally:
        await producer.shutdown()
        await admin.shutdown()
        proc.stop()
        await namesrv.stop()
