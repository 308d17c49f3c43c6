"""`ferrymq admin` group and message commands against a real `ferrymq dev` cluster."""

import re
import subprocess
import time

from tests.cli.test_admin import ferrymq
from tests.cli.test_dev import FERRYMQ, start_dev, stop


def test_lookups_resets_pause_and_rate_limit_from_the_shell(tmp_path):
    proc, banner = start_dev(tmp_path / "data")
    try:
        namesrv = re.search(r"NameServer\s+(\S+)", banner).group(1)
        admin = ["admin", "--namesrv", namesrv]
        ferrymq(*admin, "create-topic", "Orders", "--queues", "1")
        sent = ferrymq(
            "produce", "--namesrv", namesrv, "--topic", "Orders", "--key", "order-7", "first", "second"
        )
        msg_id = re.search(r"msgId=(\S+)", sent).group(1)

        shown = ferrymq(*admin, "query-msg", msg_id, "--topic", "Orders")
        assert re.search(r"Keys:\s+order-7", shown) and "5 bytes: first" in shown
        deadline = time.monotonic() + 20
        while "2 messages with key order-7" not in (
            table := ferrymq(*admin, "query-key", "Orders", "order-7")
        ):
            assert time.monotonic() < deadline, table  # the index trails the CommitLog a little
        assert "0 messages" in ferrymq(
            *admin, "query-key", "Orders", "order-7", "--end", "2001-01-01T00:00:00"
        )

        reset = ferrymq(*admin, "reset-offset", "Readers", "Orders", "end")
        assert re.search(r"│\s*0\s*│\s*2\s*│", reset), reset  # queue 0 moved to its end, offset 2
        assert "total lag 0" in ferrymq(*admin, "consumer-progress", "Readers", "Orders")

        assert "paused" in ferrymq(*admin, "pause", "Readers")
        assert "at most 50 messages/s" in ferrymq(*admin, "rate-limit", "Readers", "50")
        controls = ferrymq(*admin, "consumers", "Readers")
        assert re.search(r"broker-a\s*│\s*yes\s*│.*50/s", controls), controls
        ferrymq(*admin, "resume", "Readers")
        ferrymq(*admin, "rate-limit", "Readers", "off")
        assert re.search(r"broker-a\s*│\s*no\s*│\s*│\s*none", ferrymq(*admin, "consumers", "Readers"))

        command = [*FERRYMQ, *admin, "rate-limit", "Readers", "fast"]
        bad = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert bad.returncode != 0 and "not a number" in bad.stderr and "Traceback" not in bad.stderr
    finally:
        stop(proc)
