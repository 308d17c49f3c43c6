"""SIGKILL a SYNC_FLUSH writer at seeded random moments and drop every CommitLog byte no fdatasync
covered (a power loss; tests/durable.py); every acknowledged message must survive.

Rounds run on one store, so each recovery starts from what the previous ones left. Set
FERRYMQ_CRASH_ROUNDS and FERRYMQ_CRASH_SEED to run longer or other schedules.
"""

import os
import random
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferrymq.store import MessageStore

from ..durable import build_durable_log, lose_unsynced, preload_env
from .conftest import read_queue
from .crash_writer import body_of, crash_config

ROUNDS = int(os.environ.get("FERRYMQ_CRASH_ROUNDS", "20"))
SEED = int(os.environ.get("FERRYMQ_CRASH_SEED", "20261122"))
WRITER = Path(__file__).with_name("crash_writer.py")


def run_and_kill(
    root: Path, round_no: int, rnd: random.Random, env: dict[str, str]
) -> list[tuple[str, int, str]]:
    """Start a writer, SIGKILL it after a random number of acks (plus a random few ms); return all acks."""
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(root), str(round_no), str(SEED)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src"), **env},
    )
    want = rnd.randint(0, 600)
    seen = 0
    deadline = time.monotonic() + 30
    buf = b""
    output = selectors.DefaultSelector()  # epoll: no FD_SETSIZE bound on the descriptor's number
    output.register(proc.stdout, selectors.EVENT_READ)
    while seen < want and time.monotonic() < deadline:
        ready = output.select(1.0)
        if not ready:
            assert proc.poll() is None, proc.stderr.read().decode()
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        buf += chunk
        seen = buf.count(b"\n")
    output.close()
    time.sleep(rnd.random() * 0.005)
    proc.send_signal(signal.SIGKILL)
    rest, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err.decode()
    lines = (buf + rest).decode().splitlines()
    return [(t, int(q), i) for t, q, i in (line.split() for line in lines)]  # a torn last line cannot happen:
    # each ack line is written whole by one write() of a line-terminated string.


@pytest.mark.crash
def test_every_acknowledged_message_survives_sigkill(tmp_path):
    rnd = random.Random(SEED)
    root = tmp_path / "store"
    log = tmp_path / "durable.log"
    env = preload_env(build_durable_log(tmp_path), log)
    acked: dict[str, tuple[str, int]] = {}
    dropped = 0
    for round_no in range(ROUNDS):
        for topic, queue, msg_id in run_and_kill(root, round_no, rnd, env):
            acked[msg_id] = (topic, queue)
        dropped += lose_unsynced(crash_config(root).commitlog_dir, log)
        store = MessageStore(crash_config(root)).open()
        try:
            found = {}
            for topic, queue in {(t, q) for t in (f"Crash{i}" for i in range(3)) for q in range(4)}:
                msgs = read_queue(store, topic, queue)  # CRC-checked: no corrupt record comes back
                assert [m.queue_offset for m in msgs] == list(range(len(msgs)))
                for m in msgs:
                    msg_id = m.keys[0]
                    assert msg_id not in found, f"{msg_id} stored twice"
                    assert m.body == body_of(msg_id), f"{msg_id} changed on disk"
                    found[msg_id] = (topic, queue)
            missing = [i for i in acked if i not in found]
            assert not missing, (
                f"round {round_no}: {len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
            )
            assert all(found[i] == where for i, where in acked.items())
            key = next(iter(acked), None)
            if key:
                assert store.wait_dispatched(), "the indexer did not catch up"
                assert store.query_message(*acked[key][:1], key, 1, 0, 2**62), "index lost a key"
        finally:
            store.close()
    assert len(acked) > ROUNDS * 50, "the writer barely wrote anything: the test would prove little"
    assert dropped, "no kill found unsynced bytes to drop: the rounds tested little"
