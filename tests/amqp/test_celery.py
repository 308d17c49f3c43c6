"""Celery 5.7 (its own venv) runs tasks through the gateway: a worker process consumes, a client
sends single tasks, a retried one, a group and a chain, and gets every result back over AMQP
(Celery's rpc:// result backend)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.amqp.conftest import CLIENTS
from tests.compat.conftest import stop_process
from tests.compat.venvs import client_venv

pytestmark = pytest.mark.compat
CELERY = ("celery-5.7.0", ["celery==5.7.0"])


@pytest.fixture(scope="session")
def celery_python() -> Path:
    return client_venv(*CELERY)


def test_celery_worker_runs_tasks_through_the_gateway(celery_python, gateway, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env |= {
        "BROKER_URL": f"amqp://guest:guest@{gateway.host}:{gateway.port}//",
        "CELERY_QUEUE": f"ferrymq-celery-{uuid.uuid4().hex[:8]}",
        "PYTHONPATH": str(CLIENTS),
    }
    worker_argv = [str(celery_python), "-m", "celery", "-A", "celery_app", "worker", "--pool", "solo",
                   "--without-heartbeat", "--without-mingle", "--without-gossip"]  # fmt: skip
    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen(
            worker_argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        done = subprocess.run(
            [str(celery_python), str(CLIENTS / "celery_client.py")], env=env, capture_output=True, text=True,
            timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0, (
            f"{done.stderr[-3000:]}\nworker:\n{(tmp_path / 'worker.log').read_text()[-3000:]}"
        )
        assert json.loads(done.stdout.strip().splitlines()[-1]) == {
            "single": [2 * i for i in range(10)],
            "retried": 40,
            "group": [1, 2, 3, 4, 5],
            "chain": 6,
        }
    finally:
        stop_process(worker)
