"""Settings files as users write them: the examples load, `ferrymq config` checks and lists, and a
NameServer starts from a file with its options winning."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from ferrymq.broker.config import BrokerConfig
from ferrymq.cli.main import main
from ferrymq.settings import reference

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.mark.parametrize(("role", "example"), [("broker", "broker.toml"), ("broker", "broker-secure.toml"),
                                               ("broker", "broker-dledger.toml"),
                                               ("namesrv", "namesrv.toml")])  # fmt: skip
def test_every_example_file_is_fine(role, example):
    done = CliRunner().invoke(main, ["config", "check", role, str(EXAMPLES / example)])
    assert done.exit_code == 0, done.output
    assert "fine" in done.output


def test_a_wrong_name_is_refused_with_a_suggestion(tmp_path):
    bad = tmp_path / "broker.toml"
    bad.write_text('brokerNmae = "x"\n')
    done = CliRunner().invoke(main, ["config", "check", "broker", str(bad)])
    assert done.exit_code == 1
    assert "unknown setting 'brokerNmae' (did you mean 'broker_name'?)" in done.output


def test_the_reference_lists_every_broker_setting():
    done = CliRunner().invoke(main, ["config", "reference", "broker"])
    listed = re.findall(r"^\| `(\w+)` \|", done.output, re.M)
    assert listed == [name for name, _, _ in reference(BrokerConfig)]


def test_a_namesrv_starts_from_a_file_and_its_options_win(tmp_path):
    conf = tmp_path / "namesrv.toml"
    conf.write_text(
        'listenHost = "127.0.0.2"\nlisten_port = 1\nkv_config_path = "%s"\n' % (tmp_path / "kv.json")
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferrymq", "namesrv", "-c", str(conf), "--listen", "127.0.0.1:0",
         "--metrics-port", "-1"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the start line (logs go to stderr)
        assert re.match(r"NameServer listening on 127\.0\.0\.1:\d+", line), line
    finally:
        proc.terminate()
        proc.wait(30)
    conf.write_text("listen_prot = 1\n")
    done = subprocess.run([sys.executable, "-m", "ferrymq", "namesrv", "-c", str(conf)], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 1
    assert "unknown setting 'listen_prot' (did you mean 'listen_port'?)" in done.stderr


def _namesrv_log(*options: str) -> str:
    """What a NameServer started with these global options wrote to stderr until stopped."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferrymq", *options, "namesrv", "--listen", "127.0.0.1:0",
         "--metrics-port", "-1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("NameServer listening")
    proc.terminate()
    return proc.communicate(timeout=30)[1]


def test_servers_log_json_lines_at_the_level_asked():
    records = [json.loads(line) for line in _namesrv_log("--log-format", "json").splitlines()]
    assert any(r["level"] == "INFO" and "listening" in r["message"] for r in records)
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert "INFO" not in _namesrv_log("--log-level", "warning")


def test_a_controller_starts_from_a_file_of_its_options(tmp_path):
    """The roles whose settings are their options read the same kind of file, by the options' names."""
    from ferrymq.bench.processes import free_port

    raft = free_port()
    conf = tmp_path / "controller.toml"
    conf.write_text(
        f'id = "n1"\npeers = "n1@127.0.0.1:{raft}"\nlisten = "127.0.0.2:0"\ndataDir = "{tmp_path / "ctl"}"\n'
        "metrics_port = -1\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferrymq", "controller", "-c", str(conf), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "FERRYMQ_SCAN_INTERVAL": "2000"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert re.match(r"controller n1 listening on 127\.0\.0\.1:\d+", proc.stdout.readline())
    finally:
        proc.terminate()
        proc.wait(30)
    assert (tmp_path / "ctl").is_dir()
    bad = subprocess.run(
        [sys.executable, "-m", "ferrymq", "controller", "-c", str(conf)], capture_output=True, text=True,
        timeout=60, env={**os.environ, "FERRYMQ_SCAN_INTERVAL": "often"},
    )  # fmt: skip
    assert bad.returncode == 1
    assert "'scan_interval'" in bad.stderr and "$FERRYMQ_SCAN_INTERVAL" in bad.stderr
    conf.write_text('lisen = "x"\n')
    bad = subprocess.run([sys.executable, "-m", "ferrymq", "proxy", "-c", str(conf)], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert "unknown setting 'lisen' (did you mean 'listen'?)" in bad.stderr


@pytest.mark.parametrize("role", ["controller", "proxy", "amqp", "meta", "console"])
def test_the_example_file_of_each_option_role_reads(role):
    """Its keys are the command's options and its values their types (parsed, nothing started)."""
    command = main.get_command(click.Context(main), role)
    assert command is not None
    with command.make_context(role, ["-c", str(EXAMPLES / f"{role}.toml")]) as ctx:
        assert ctx.default_map, ctx.default_map
