"""SIGKILL a SYNC_FLUSH broker while a consumer pops and acks, at seeded random moments.

At least once: every produced message is eventually acked (or its ack was sent when the broker
died: then it may hold or not). And an acknowledged ack holds: no
message whose ack the broker confirmed is handed out again, before or after a restart. Set
FERRYMQ_POP_CRASH_ROUNDS and FERRYMQ_POP_CRASH_SEED to run longer or other schedules.
"""

from __future__ import annotations

import asyncio
import os
import random
import time

import pytest

from ferrymq.bench.processes import Proc, free_port
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer
from ferrymq.net import RemotingClient, RemotingError
from ferrymq.protocol.codes import RequestCode as Req
from ferrymq.protocol.codes import ResponseCode as Res
from ferrymq.protocol.message_ext import decode_records
from ferrymq.protocol.pop import POP_CK
from ferrymq.protocol.properties import encode_properties
from ferrymq.protocol.remoting import RemotingCommand

ROUNDS = int(os.environ.get("FERRYMQ_POP_CRASH_ROUNDS", "4"))
SEED = int(os.environ.get("FERRYMQ_POP_CRASH_SEED", "20261125"))
MESSAGES = 400


class Harness:
    def __init__(self, client: RemotingClient, addr: str) -> None:
        self.client = client
        self.addr = addr
        self.acked_at: dict[str, float] = {}  # message id -> when the broker confirmed its ack
        self.violations: list[str] = []
        self.deliveries: dict[str, int] = {}
        self.ack_unanswered: set[str] = set()  # the broker died with the ack: it may hold or not

    async def call(self, code: int, ext: dict, body: bytes = b"", timeout: float = 5.0) -> RemotingCommand:
        request = RemotingCommand(code, ext_fields={k: str(v) for k, v in ext.items()}, body=body)
        return await self.client.invoke(self.addr, request, timeout)

    async def consume(self, rnd: random.Random, ack_ratio: float) -> None:
        """Pop and ack until cancelled (or the broker goes away)."""
        while True:
            sent_at = time.monotonic()
            ext = {
                "consumerGroup": "CG",
                "topic": "CT",
                "queueId": -1,
                "maxMsgNums": 16,
                "invisibleTime": 1000,
                "pollTime": 300,
                "bornTime": int(time.time() * 1000),
                "initMode": 0,
            }
            try:
                response = await self.call(Req.POP_MESSAGE, ext, timeout=3)
            except RemotingError:
                await asyncio.sleep(0.05)
                continue
            if response.code != Res.SUCCESS:
                continue
            for m in decode_records(response.body):
                msg_id = m.keys[0]
                self.deliveries[msg_id] = self.deliveries.get(msg_id, 0) + 1
                if msg_id in self.acked_at and self.acked_at[msg_id] < sent_at:
                    self.violations.append(f"{msg_id} delivered again after its ack was confirmed")
                if rnd.random() < ack_ratio:
                    handle = m.properties[POP_CK]
                    parts = handle.split(" ")
                    ack = {
                        "consumerGroup": "CG",
                        "topic": "CT",
                        "queueId": parts[6],
                        "extraInfo": handle,
                        "offset": parts[7],
                    }
                    self.ack_unanswered.add(msg_id)  # until the broker answers (a kill may come first)
                    try:
                        answer = await self.call(Req.ACK_MESSAGE, ack)
                    except RemotingError:
                        continue
                    self.ack_unanswered.discard(msg_id)
                    if answer.code == Res.SUCCESS:
                        self.acked_at.setdefault(msg_id, time.monotonic())


def broker(tmp_path, port: int, namesrv: int) -> Proc:
    env = {"FERRYMQ_FLUSH_DISK_TYPE": "SYNC_FLUSH"}
    args = [
        "broker",
        "--namesrv",
        f"127.0.0.1:{namesrv}",
        "--listen",
        f"127.0.0.1:{port}",
        "--store-dir",
        str(tmp_path / "store"),
        "--ha-port",
        "0",
    ]
    return Proc("broker", args, tmp_path, env, [])


@pytest.mark.crash
async def test_acks_hold_and_nothing_is_lost_across_sigkills(tmp_path):
    rnd = random.Random(SEED)
    namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
    await namesrv.start()
    port = free_port()
    proc = broker(tmp_path, port, namesrv.port)
    client = RemotingClient()
    harness = Harness(client, f"127.0.0.1:{port}")
    try:
        proc.start()
        await proc.wait_for_line("listening on", 60)
        topic = {
            "topic": "CT",
            "defaultTopic": "TBW102",
            "readQueueNums": 2,
            "writeQueueNums": 2,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
        }
        assert (await harness.call(Req.UPDATE_AND_CREATE_TOPIC, topic)).code == Res.SUCCESS
        for i in range(MESSAGES):
            ext = {
                "producerGroup": "P",
                "topic": "CT",
                "defaultTopic": "TBW102",
                "defaultTopicQueueNums": 2,
                "queueId": i % 2,
                "sysFlag": 0,
                "bornTimestamp": int(time.time() * 1000),
                "flag": 0,
                "properties": encode_properties({"KEYS": f"id{i}"}),
            }
            assert (await harness.call(Req.SEND_MESSAGE, ext, f"body{i}".encode())).code == Res.SUCCESS
        acked_before_kills = 0
        for _ in range(ROUNDS):
            since = len(proc.log_text())
            consumer = asyncio.create_task(harness.consume(rnd, ack_ratio=0.7))
            await asyncio.sleep(rnd.uniform(0.2, 1.5))
            proc.kill()
            acked_before_kills = len(harness.acked_at)
            consumer.cancel()
            await asyncio.gather(consumer, return_exceptions=True)
            proc.start()
            await proc.wait_for_line("listening on", 60, since=since)
        consumer = asyncio.create_task(harness.consume(rnd, ack_ratio=1.0))
        deadline = time.monotonic() + 60
        while (
            len(harness.acked_at.keys() | harness.ack_unanswered) < MESSAGES and time.monotonic() < deadline
        ):
            await asyncio.sleep(0.1)
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        # a message whose ack went unanswered was consumed: it may stay acked, or come back
        missing = sorted(
            set(f"id{i}" for i in range(MESSAGES)) - set(harness.acked_at) - harness.ack_unanswered
        )
        assert not missing, f"{len(missing)} messages never came back to be acked, e.g. {missing[:5]}"
        assert not harness.violations, harness.violations[:5]
        assert acked_before_kills > 0, "the kills came before any ack: the rounds tested nothing"
        assert max(harness.deliveries.values()) >= 2, "nothing was delivered again: un-acked ones must be"
    finally:
        await client.close()
        proc.stop()
        await namesrv.stop()
