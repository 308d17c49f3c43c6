"""One cached virtual environment per real client library.

The clients cannot share a venv (several install a top-level package called ``rocketmq``), and none may
go into the project's own venv, so each gets ``<project>/.compat-venvs/<name>/``. A venv is built once
and reused until its requirements (or the Python that builds it) change. A file lock makes two pytest
processes that ask at the same time build it only once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
VENVS_DIR = PROJECT_ROOT / ".compat-venvs"
STAMP = ".compat-stamp"  # written last: a half-built venv is never taken as ready

LOCK_TIMEOUT = 900.0  # seconds to wait for another process that is building the same venv
COMMAND_TIMEOUT = 600.0  # seconds for `python -m venv` or `pip install`


class ClientVenvError(RuntimeError):
    """A client venv could not be built: the message says which step failed and shows its output."""


def client_venv(name: str, requirements: Sequence[str]) -> Path:
    """The python of venv `name` with exactly `requirements` installed, building it on first use."""
    venv = VENVS_DIR / name
    python = venv / "bin" / "python"
    key = _key(requirements)
    if _is_ready(venv, key):
        return python
    VENVS_DIR.mkdir(parents=True, exist_ok=True)
    with _locked(VENVS_DIR / f"{name}.lock"):
        if _is_ready(venv, key):  # built by another process while we waited
            return python
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(venv)], f"creating the {name} venv")
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
        _run([*pip, *requirements], f"installing {' '.join(requirements)} into {venv}")
        (venv / STAMP).write_text(key)
    return python


def _key(requirements: Sequence[str]) -> str:
    """Requirements plus the interpreter and machine they were installed for."""
    basis = [list(requirements), platform.python_version(), platform.machine()]
    return hashlib.sha256(json.dumps(basis).encode()).hexdigest()


def _is_ready(venv: Path, key: str) -> bool:
    try:
        return (venv / STAMP).read_text() == key and (venv / "bin" / "python").exists()
    except OSError:
        return False


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path`, waiting at most LOCK_TIMEOUT for another holder."""
    with path.open("a") as handle:
        deadline = time.monotonic() + LOCK_TIMEOUT
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ClientVenvError(
                        f"{path} stayed locked for {LOCK_TIMEOUT:.0f}s: is another run stuck building it?"
                    ) from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(argv: list[str], what: str) -> None:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise ClientVenvError(f"{what}: still running after {COMMAND_TIMEOUT:.0f}s") from None
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip().splitlines()[-40:]
        raise ClientVenvError(f"{what} failed (exit {done.returncode}):\n" + "\n".join(output))
