"""Classic (non-controller) broker groups as real processes on loopback: a NameServer and brokers
each started, SIGSTOPped, SIGKILLed and restarted by PID (see ferrymq.bench.processes.Proc)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import msgspec

from ferrymq.bench.processes import Proc, free_port
from ferrymq.net import RemotingClient
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand
from tests.broker.test_broker import send_ext

SETTLE = 90.0  # seconds any one step may take on a busy two-core machine
SMALL_FILES = {"FERRYMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(64 << 20)}


class ClassicCluster:
    def __init__(self, root: Path, cluster: str = "ClassicCluster") -> None:
        self.root = root
        self.cluster = cluster
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.namesrv_addr = f"127.0.0.1:{free_port()}"
        self.namesrv = Proc("namesrv", ["namesrv", "--listen", self.namesrv_addr], self.logs, {}, [])
        self.brokers: dict[str, Proc] = {}
        self.addrs: dict[str, str] = {}
        self.client = RemotingClient()

    def add_broker(self, name: str, group: str, settings: dict[str, str], *, slave_id: int = 0) -> Proc:
        """A broker process `name` of broker group `group`: its master, or with `slave_id` a slave."""
        address = f"127.0.0.1:{free_port()}"
        env = {**SMALL_FILES, "FERRYMQ_HA_LISTEN_PORT": str(free_port()), **settings}
        if slave_id:
            env.update(FERRYMQ_BROKER_ROLE="SLAVE", FERRYMQ_BROKER_ID=str(slave_id))
        args = ["broker", "--namesrv", self.namesrv_addr, "--listen", address, "--cluster", self.cluster,
                "--name", group, "--store-dir", str(self.root / name)]  # fmt: skip
        self.brokers[name] = Proc(name, args, self.logs, env, [])
        self.addrs[name] = address
        return self.brokers[name]

    async def start(self, proc: Proc) -> None:
        since = len(proc.log_text())
        proc.start()
        await proc.wait_for_line("listening on", SETTLE, since)

    async def stop(self) -> None:
        for proc in [*reversed(self.brokers.values()), self.namesrv]:
            proc.stop()
        await self.client.close()

    async def call(self, broker: str, code: int, ext: dict[str, str] | None = None, body: bytes = b""):
        request = RemotingCommand(code, ext_fields=ext or {}, body=body)
        return await self.client.invoke(self.addrs[broker], request, 10.0)

    async def send(self, broker: str, topic: str, body: bytes, props: dict[str, str] | None = None) -> int:
        """SEND_MESSAGE to one broker; the answer's code."""
        ext = {k: str(v) for k, v in send_ext(topic, 0, props).items()}
        return (await self.call(broker, RequestCode.SEND_MESSAGE, ext, body)).code

    async def runtime(self, broker: str) -> dict[str, str]:
        response = await self.call(broker, RequestCode.GET_BROKER_RUNTIME_INFO)
        return msgspec.json.decode(response.body)["table"]

    async def create_topic(self, broker: str, topic: str, queues: int = 1) -> None:
        fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
                  "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG"}  # fmt: skip
        response = await self.call(broker, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
        assert response.code == ResponseCode.SUCCESS, response.remark


async def ferrymq_cli(*args: str) -> str:
    """Run a ferrymq command; its output (wide, so that tables do not wrap)."""
    env = {**os.environ, "COLUMNS": "200"}
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "ferrymq", *args], capture_output=True, text=True, env=env,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout
