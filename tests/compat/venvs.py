"""One cached environment per real client library.

The clients cannot share a venv (several install a top-level package called ``rocketmq``), and none may
go into the project's own venv, so each Python client gets ``<project>/.compat-venvs/<name>/`` and each
Node.js client ``<project>/.compat-node/<name>/``. An environment is built once and reused until its
requirements (or the Python or Node that builds it) change. Source distributions whose tests are run
unpack into ``<project>/.compat-sdists/<name>/src/``. A file lock makes two pytest processes that
ask at the same time build it only once.
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
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
VENVS_DIR = PROJECT_ROOT / ".compat-venvs"
SDISTS_DIR = PROJECT_ROOT / ".compat-sdists"
NODE_DIR = PROJECT_ROOT / ".compat-node"
STAMP = ".compat-stamp"  # written last: a half-built environment is never taken as ready

LOCK_TIMEOUT = 900.0  # seconds to wait for another process that is building the same environment
COMMAND_TIMEOUT = 600.0  # seconds for one build step (`python -m venv`, `pip install`, `npm install`)


class ClientEnvError(RuntimeError):
    """A client environment could not be built: the message says which step failed and shows its output."""


def client_venv(name: str, requirements: Sequence[str]) -> Path:
    """The python of venv `name` with exactly `requirements` installed, building it on first use."""
    venv = VENVS_DIR / name
    python = venv / "bin" / "python"

    def build() -> None:
        _run([sys.executable, "-m", "venv", str(venv)], f"creating the {name} venv")
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
        _run([*pip, *requirements], f"installing {' '.join(requirements)} into {venv}")

    _built_once(venv, _key([list(requirements), platform.python_version()]), python, build)
    return python


def client_node_modules(name: str, packages: Sequence[str]) -> Path:
    """The node_modules folder of Node.js environment `name` with exactly `packages` installed (npm
    specs such as ``pkg@1.0.8``), building it on first use."""
    home = NODE_DIR / name
    modules = home / "node_modules"

    def build() -> None:
        home.mkdir(parents=True)
        (home / "package.json").write_text('{"private": true}\n')  # npm installs here, not in a parent
        npm = ["npm", "install", "--no-audit", "--no-fund", "--no-update-notifier"]
        _run([*npm, *packages], f"installing {' '.join(packages)} into {home} with npm", cwd=home)

    node = _run(["node", "--version"], "asking node for its version").strip()
    _built_once(home, _key([list(packages), node]), modules, build)
    return modules


def client_sdist(name: str, requirement: str) -> Path:
    """The unpacked source distribution of `requirement` (``pkg==1.2.3``) from PyPI, downloaded on first use:
    some clients publish their integration tests only there, never in the wheel."""
    home = SDISTS_DIR / name

    def build() -> None:
        home.mkdir(parents=True)
        with tempfile.TemporaryDirectory() as download:
            pip = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-input"]
            _run(
                [*pip, "--no-deps", "--no-binary", ":all:", "-d", download, requirement],
                f"downloading {requirement}",
            )
            archives = list(Path(download).iterdir())
            if len(archives) != 1 or not archives[0].name.endswith(".tar.gz"):
                raise ClientEnvError(
                    f"downloading {requirement} gave {[a.name for a in archives]}, not one .tar.gz"
                )
            with tarfile.open(archives[0]) as archive:
                archive.extractall(home, filter="data")
        (tree,) = (entry for entry in home.iterdir() if entry.is_dir())
        tree.rename(home / "src")

    _built_once(home, _key([requirement]), home / "src", build)
    return home / "src"


def _built_once(directory: Path, key: str, product: Path, build: Callable[[], None]) -> None:
    """Make `directory` (whose `product` is what callers use) by `build` unless it is stamped with `key`."""
    if _is_ready(directory, key, product):
        return
    directory.parent.mkdir(parents=True, exist_ok=True)
    with _locked(directory.parent / f"{directory.name}.lock"):
        if _is_ready(directory, key, product):  # built by another process while we waited
            return
        shutil.rmtree(directory, ignore_errors=True)
        build()
        (directory / STAMP).write_text(key)


def _key(basis: list) -> str:
    """What was installed, and with which runtime, plus the machine it was installed for."""
    return hashlib.sha256(json.dumps([*basis, platform.machine()]).encode()).hexdigest()


def _is_ready(directory: Path, key: str, product: Path) -> bool:
    try:
        return (directory / STAMP).read_text() == key and product.exists()
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
                    raise ClientEnvError(
                        f"{path} stayed locked for {LOCK_TIMEOUT:.0f}s: is another run stuck building it?"
                    ) from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(argv: list[str], what: str, cwd: Path | None = None) -> str:
    """The output of a build step that must succeed within COMMAND_TIMEOUT."""
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL, cwd=cwd
        )
    except subprocess.TimeoutExpired:
        raise ClientEnvError(f"{what}: still running after {COMMAND_TIMEOUT:.0f}s") from None
    except OSError as e:  # the program itself is missing
        raise ClientEnvError(f"{what} failed: {e}") from None
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip().splitlines()[-40:]
        raise ClientEnvError(f"{what} failed (exit {done.returncode}):\n" + "\n".join(output))
    return done.stdout
