"""Send to ONE broker address directly (no NameServer, no failover) and log every answer as a JSON line.

Used to watch what an old master answers while it is cut off or paused: it may run inside the old
master's network namespace. Lines: {"key", "code", "sent_at", "answered_at"} (wall-clock seconds).
`launch` starts it as a child writing to a file, `answers` reads what it wrote so far.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ferrymq.net import RemotingClient, RemotingError
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.properties import encode_properties
from ferrymq.protocol.remoting import RemotingCommand


def request(topic: str, key: str) -> RemotingCommand:
    props = encode_properties({"KEYS": key, "UNIQ_KEY": key, "WAIT": "true"})
    ext = {"a": "direct-sender", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": props, "j": "0", "k": "false"}  # fmt: skip
    return RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields=ext, body=key.encode())


async def main(args: argparse.Namespace) -> None:
    client = RemotingClient(connect_timeout=1.0)
    deadline = time.monotonic() + args.seconds
    i = 0
    while time.monotonic() < deadline:
        i += 1
        key = f"{args.prefix}-{i}"
        sent_at = time.time()
        try:
            response = await client.invoke(args.broker, request(args.topic, key), timeout=2.0)
            code = response.code
        except RemotingError as exc:
            code = f"error: {exc}"
        print(
            json.dumps({"key": key, "code": code, "sent_at": sent_at, "answered_at": time.time()}), flush=True
        )
        await asyncio.sleep(args.interval)
    await client.close()


def launch(
    broker: str, topic: str, seconds: float, out: Path, prefix: list[str] | None = None
) -> subprocess.Popen:
    """This script as a child process (inside a namespace with `prefix`), its lines going to `out`."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    args = [sys.executable, __file__, "--broker", broker, "--topic", topic, "--seconds", str(seconds)]
    with open(out, "a") as lines:
        return subprocess.Popen([*(prefix or []), *args], stdout=lines, text=True, env=env)


def answers(out: Path) -> list[dict]:
    """The answers logged to `out` so far (whole lines only: the child may be writing one)."""
    try:
        text = out.read_text()
    except FileNotFoundError:
        return []
    return [
        json.loads(line)
        for line in text.splitlines(keepends=True)
        if line.startswith("{") and line.endswith("\n")
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--prefix", default="direct")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=0.05)
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
