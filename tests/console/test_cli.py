"""`ferrymq console` (and the console of `ferrymq dev`) as its own process over a cluster."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from typing import Any

from ferrymq.bench.processes import free_port
from tests.auth.conftest import ROOT


async def started(
    args: list[str], last: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, str]:
    """`ferrymq ARGS` and what it printed up to the line starting with `last`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferrymq", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    seen: list[str] = []
    try:
        while not seen or not seen[-1].strip().startswith(last):  # after the log lines, if any
            seen.append(await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30))
            assert seen[-1] and len(seen) < 50, seen
    except BaseException:
        proc.kill()
        proc.communicate(timeout=30)
        raise
    return proc, "".join(seen)


async def stopped(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    out, _ = await asyncio.to_thread(proc.communicate, timeout=30)
    assert proc.returncode == 0, out
    return out


async def get(url: str) -> Any:
    def read() -> Any:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.load(answer)

    return await asyncio.to_thread(read)


async def test_ferrymq_console_serves_the_cluster_it_is_given(cluster_console):
    cluster, console = cluster_console
    await console.post("/api/topics", {"topic": "FromCli", "queues": 1})
    port = free_port()
    proc, out = await started(
        ["console", "--namesrv", cluster.namesrv_addr, "--port", str(port)], "Console on"
    )
    try:
        assert f"Console on http://127.0.0.1:{port}/ for the cluster at NameServer" in out
        assert "FromCli" in [t["topic"] for t in await get(f"http://127.0.0.1:{port}/api/topics")]
    finally:
        out = await stopped(proc)
    assert "Console stopped." in out


async def test_ferrymq_console_acts_with_the_credentials_in_its_environment(make_secure):
    cluster = await make_secure()
    port = free_port()
    env = {"FERRYMQ_ACCESS_KEY": ROOT[0], "FERRYMQ_SECRET_KEY": ROOT[1]}
    proc, _ = await started(
        ["console", "--namesrv", cluster.namesrv_addr, "--port", str(port)], "Console on", env
    )
    try:
        acl = await get(f"http://127.0.0.1:{port}/api/acl")
        assert acl["enabled"] is True and acl["actingAs"] == ROOT[0]
    finally:
        await stopped(proc)


async def test_ferrymq_dev_with_auth_starts_its_console_as_the_first_user(tmp_path):
    args = [
        "dev", "--data-dir", str(tmp_path), "--namesrv-port", "0", "--broker-port", "0", "--proxy-port", "-1",
        "--amqp-port", "-1", "--metrics-port", "-1", "--console-port", str(free_port()),
        "--auth-user", ":".join(ROOT),
    ]  # fmt: skip
    proc, banner = await started(args, "Press Ctrl-C")
    try:
        console = re.search(r"Console\s+(http://\S+)", banner).group(1)
        acl = await get(console + "api/acl")
        assert acl["enabled"] is True and acl["actingAs"] == ROOT[0]
        assert [u["username"] for u in acl["users"]] == [ROOT[0]]
    finally:
        await stopped(proc)
