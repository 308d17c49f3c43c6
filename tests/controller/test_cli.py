"""`ferrymq controller` and `ferrymq namesrv --controller-*` as real processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from ferrymq.bench.processes import free_ports
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.controller import GetMetaDataResponseHeader
from tests.compat.conftest import remoting_call

FERRYMQ = [sys.executable, "-m", "ferrymq"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*FERRYMQ, *args], capture_output=True, text=True, timeout=60)


def test_bad_peers_are_refused_clearly(tmp_path):
    for args, message in [
        (["--id", "n9", "--peers", "n1@127.0.0.1:1"], "not among the peers"),
        (["--id", "n1", "--peers", "n1-127.0.0.1:1"], "expected id@host:port"),
        (["--id", "n1", "--peers", "n1@127.0.0.1:1;n1@127.0.0.1:2"], "appears twice"),
    ]:
        result = run("controller", *args, "--data-dir", str(tmp_path))
        assert result.returncode != 0 and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_namesrv_with_an_embedded_controller(tmp_path):
    raft, remoting = free_ports(2)
    proc = subprocess.Popen(
        [*FERRYMQ, "namesrv", "--listen", "127.0.0.1:0", "--controller-id", "n1",
         "--controller-peers", f"n1@127.0.0.1:{raft}", "--controller-listen", f"127.0.0.1:{remoting}",
         "--controller-data-dir", str(tmp_path / "n1")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        banner = next((line for line in proc.stdout if "NameServer listening" in line), "")
        assert "NameServer listening" in banner and f"controller n1 on 127.0.0.1:{remoting}" in banner, banner
        deadline = time.monotonic() + 30
        while True:
            reply = remoting_call(f"127.0.0.1:{remoting}", RequestCode.CONTROLLER_GET_METADATA_INFO, {})
            meta = GetMetaDataResponseHeader.from_ext_fields(reply.ext_fields)
            if meta.is_leader:
                break
            assert time.monotonic() < deadline, "a one-node controller group never elected itself"
            time.sleep(0.1)
        assert meta.controller_leader_address == f"127.0.0.1:{remoting}"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
