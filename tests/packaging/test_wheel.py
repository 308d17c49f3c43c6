"""The wheel as a user gets it: `python -m build` makes it with the C accelerators compiled in, and
in a clean venv it installs, starts a cluster that says its accelerators loaded, and moves a
message."""

from __future__ import annotations

import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from ferrymq._native import ACCELERATORS
from tests.cli.test_dev import start_dev, stop

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (found,) = out.glob("ferrymq-*.whl")
    return found


def test_every_accelerator_has_its_c_file():
    assert sorted(p.stem for p in (ROOT / "src/ferrymq/_native").glob("*.c")) == sorted(ACCELERATORS)


def test_the_wheel_holds_the_accelerators_types_license_and_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for name in ACCELERATORS:
        assert any(re.fullmatch(rf"ferrymq/_native/{name}\.cpython-\d+.*\.so", n) for n in names), name
    assert "ferrymq/py.typed" in names
    assert "ferrymq/proxy/v2/messaging.proto" in names
    assert "ferrymq/console/static/index.html" in names  # the console needs no network
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith(("tests/", "bench/")) for n in names)


def test_a_clean_venv_installs_it_and_runs_a_cluster(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
        capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    ferrymq = [str(env_dir / "bin" / "ferrymq")]
    proc, banner = start_dev(tmp_path / "data", ferrymq)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"C accelerators: loaded ({', '.join(ACCELERATORS)})"
        namesrv = re.search(r"NameServer\s+(\S+)", banner).group(1)
        sent = subprocess.run(
            [*ferrymq, "produce", "--namesrv", namesrv, "--topic", "Wheel", "from the wheel"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert sent.returncode == 0 and "SEND_OK" in sent.stdout, sent.stderr
        got = subprocess.run(
            [*ferrymq, "consume", "--namesrv", namesrv, "--topic", "Wheel", "--group", "G", "--from", "first",
             "--count", "1"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert got.returncode == 0 and "from the wheel" in got.stdout, got.stderr
    finally:
        stop(proc)
