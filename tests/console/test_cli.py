"""`ferrymq console` as its own process over a cluster."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import urllib.request

from ferrymq.bench.processes import free_port


async def test_ferrymq_console_serves_the_cluster_it_is_given(cluster_console):
    cluster, console = cluster_console
    await console.post("/api/topics", {"topic": "FromCli", "queues": 1})
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferrymq", "console", "--namesrv", cluster.namesrv_addr, "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        seen = []
        while not seen or not seen[-1].startswith("Console on"):  # after the log lines, if any
            seen.append(await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30))
            assert seen[-1] and len(seen) < 50, seen
        assert seen[-1].startswith(f"Console on http://127.0.0.1:{port}/ for the cluster at NameServer")

        def topics() -> list[str]:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/topics", timeout=10) as answer:
                return [t["topic"] for t in json.load(answer)]

        assert "FromCli" in await asyncio.to_thread(topics)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = await asyncio.to_thread(proc.communicate, timeout=30)
    assert proc.returncode == 0 and "Console stopped." in out, out
