"""`ferrymq dev` as a user runs it: a real process, stopped with Ctrl-C (SIGINT)."""

import signal
import subprocess
import sys
import time


def start_dev(data_dir):
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferrymq", "dev", "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "is running" in line:
            return proc, lines
    proc.kill()
    raise AssertionError("ferrymq dev did not start:\n" + "".join(lines))


def test_dev_starts_on_its_data_dir_and_stops_cleanly_on_ctrl_c(tmp_path):
    proc, lines = start_dev(tmp_path / "data")
    try:
        assert any(str(tmp_path / "data") in line for line in lines)
        assert (tmp_path / "data" / "store" / "abort").exists()  # running: a crash would be noticed
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "stopped cleanly" in out
    assert not (tmp_path / "data" / "store" / "abort").exists()
    assert (tmp_path / "data" / "store" / "checkpoint").exists()


def test_a_second_dev_on_the_same_data_dir_fails_with_a_clear_message(tmp_path):
    proc, _ = start_dev(tmp_path / "data")
    try:
        second = subprocess.run(
            [sys.executable, "-m", "ferrymq", "dev", "--data-dir", str(tmp_path / "data")],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert second.returncode != 0
        assert "in use by another process" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
