"""`ferrymq admin` against a real `ferrymq dev` cluster."""

import re
import subprocess

from tests.cli.test_dev import FERRYMQ, start_dev, stop


def ferrymq(*args: str) -> str:
    result = subprocess.run([*FERRYMQ, *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_topics_are_created_listed_measured_and_deleted(tmp_path):
    proc, banner = start_dev(tmp_path / "data")
    try:
        namesrv = re.search(r"NameServer\s+(\S+)", banner).group(1)
        admin = ["admin", "--namesrv", namesrv]
        assert "2 queues" in ferrymq(*admin, "create-topic", "Orders", "--queues", "2")
        assert "Orders" in ferrymq(*admin, "topics").split()
        ferrymq("produce", "--namesrv", namesrv, "--topic", "Orders", "a", "b", "c")
        table = ferrymq(*admin, "progress", "NeverConsumed", "Orders")
        assert "total lag 3" in table
        ferrymq(*admin, "delete-topic", "Orders")
        assert "Orders" not in ferrymq(*admin, "topics").split()
    finally:
        stop(proc)


def test_admin_against_no_nameserver_fails_clearly():
    result = subprocess.run(
        [*FERRYMQ, "admin", "--namesrv", "127.0.0.1:1", "topics"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "Error:" in result.stderr and "Traceback" not in result.stderr
