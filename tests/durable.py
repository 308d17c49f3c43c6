"""A power loss after a SIGKILL: drop the CommitLog bytes no fdatasync covered.

A SIGKILL loses nothing written (the page cache keeps it), so on its own a crash test cannot tell an
ack sent after fdatasync from one sent before. `durable_log.c`, preloaded into the process under test,
logs what each fdatasync of a CommitLog segment covered; after the kill `lose_unsynced` zeroes the
rest, as if the machine had lost power.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SOURCE = Path(__file__).with_name("durable_log.c")
LOG_ENV = "FERRYMQ_DURABLE_LOG"  # where the preloaded library appends its lines


def build_durable_log(directory: Path) -> Path:
    """The LD_PRELOAD library, compiled into `directory` (the test is skipped without a compiler)."""
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler to build durable_log.c")
    so = directory / "durable_log.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so), str(SOURCE), "-ldl"], check=True)
    return so


def preload_env(so: Path, log: Path) -> dict[str, str]:
    """The environment that makes a child process log its fdatasyncs to `log`."""
    return {"LD_PRELOAD": str(so), LOG_ENV: str(log)}


def lose_unsynced(commitlog: Path, durable_log: Path) -> int:
    """Zero every CommitLog byte past what the fdatasyncs logged; return how many were written there."""
    durable: dict[str, int] = {}
    if durable_log.exists():
        for line in durable_log.read_text().splitlines():
            extent, path = line.split(" ", 1)
            durable[path] = max(durable.get(path, 0), int(extent))
    dropped = 0
    for segment in commitlog.iterdir():
        keep = durable.get(os.path.realpath(segment), 0)
        data = segment.read_bytes()
        dropped += len(data[keep:].rstrip(b"\0"))
        with open(segment, "r+b") as f:
            f.seek(keep)
            f.write(bytes(len(data) - keep))
    return dropped
