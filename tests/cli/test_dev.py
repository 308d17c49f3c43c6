"""`ferrymq dev`, `produce` and `consume` as a newcomer runs them: real processes, Ctrl-C to stop."""

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

from ferrymq.bench.processes import free_port

FERRYMQ = [sys.executable, "-m", "ferrymq"]


def start_dev(data_dir, ferrymq=FERRYMQ, env=None):
    """`ferrymq dev` on free ports (run by the `ferrymq` command line given, with `env` added to the
    environment) and its banner."""
    proc = subprocess.Popen(
        [
            *ferrymq,
            "dev",
            "--data-dir",
            str(data_dir),
            "--namesrv-port",
            "0",
            "--broker-port",
            "0",
            "--proxy-port",
            "0",
            "--amqp-port",
            "0",
            "--console-port",
            str(free_port()),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    lines = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "Press Ctrl-C" in line:
            return proc, "".join(lines)
    proc.kill()
    raise AssertionError("ferrymq dev did not start:\n" + "".join(lines))


def stop(proc) -> str:
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    return out


def test_dev_runs_a_cluster_that_produce_and_consume_use(tmp_path):
    proc, banner = start_dev(tmp_path / "data")
    try:
        assert str(tmp_path / "data") in banner
        assert re.search(r"Proxy\s+127\.0\.0\.1:\d+ \(gRPC", banner), banner
        assert re.search(r"AMQP\s+127\.0\.0\.1:\d+ \(RabbitMQ clients", banner), banner
        console = re.search(r"Console\s+(http://\S+)", banner).group(1)
        with urllib.request.urlopen(console + "api/cluster", timeout=10) as answer:
            assert b'"role":"master"' in answer.read()
        namesrv = re.search(r"NameServer\s+(\S+)", banner).group(1)
        assert (tmp_path / "data" / "store" / "abort").exists()  # running: a crash would be noticed
        sent = subprocess.run(
            [*FERRYMQ, "produce", "--namesrv", namesrv, "--topic", "Demo", "--tag", "T", "one", "two"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout.count("SEND_OK") == 2
        got = subprocess.run(
            [
                *FERRYMQ,
                "consume",
                "--namesrv",
                namesrv,
                "--topic",
                "Demo",
                "--group",
                "G",
                "--from",
                "first",
                "--count",
                "2",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert got.returncode == 0, got.stderr
        assert sorted(line.split()[-1] for line in got.stdout.splitlines()) == ["one", "two"]
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert "stopped." in out
    assert not (tmp_path / "data" / "store" / "abort").exists()
    assert (tmp_path / "data" / "store" / "checkpoint").exists()


def test_dev_reads_ferrymq_settings_from_the_environment_as_every_role_does(tmp_path):
    env = {"FERRYMQ_BROKER_NAME": "broker-env", "FERRYMQ_BROKER_CLUSTER_NAME": "EnvCluster",
           "FERRYMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(1 << 20)}  # fmt: skip
    proc, banner = start_dev(tmp_path / "data", env=env)
    try:
        assert re.search(r"Broker\s+broker-env at \S+ \(cluster EnvCluster\)", banner), banner
        namesrv = re.search(r"NameServer\s+(\S+)", banner).group(1)
        sent = subprocess.run(
            [*FERRYMQ, "produce", "--namesrv", namesrv, "--topic", "Demo", "one"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        segments = list((tmp_path / "data" / "store" / "commitlog").iterdir())
        assert [s.stat().st_size for s in segments] == [1 << 20]  # not dev's own 256 MiB
    finally:
        stop(proc)
    bad = subprocess.run(
        [*FERRYMQ, "dev", "--data-dir", str(tmp_path / "other")],
        env={**os.environ, "FERRYMQ_TRANSACTION_CHECK_INTERVAL": "soon"}, capture_output=True, text=True,
        timeout=30,
    )  # fmt: skip
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "transaction_check_interval" in bad.stderr and "$FERRYMQ_TRANSACTION_CHECK_INTERVAL" in bad.stderr


def test_a_second_dev_on_the_same_data_dir_fails_with_a_clear_message(tmp_path):
    proc, _ = start_dev(tmp_path / "data")
    try:
        second = subprocess.run(
            [
                *FERRYMQ,
                "dev",
                "--data-dir",
                str(tmp_path / "data"),
                "--namesrv-port",
                "0",
                "--broker-port",
                "0",
                "--proxy-port",
                "0",
                "--amqp-port",
                "0",
                "--console-port",
                "0",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert second.returncode != 0
        assert "in use by another process" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        stop(proc)


def test_produce_without_a_nameserver_fails_clearly():
    result = subprocess.run(
        [*FERRYMQ, "produce", "--namesrv", "127.0.0.1:1", "--topic", "T", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "route" in result.stderr
