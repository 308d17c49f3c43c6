"""Keep sending with the rocketmq 0.4.4 Producer (C++ 4.x client), each message until it is acknowledged.

Runs in the client's own venv. Message i has body ``<prefix>-<i>``. Output, one JSON line each:
``{"event": "sent", "i", "body", "t"}`` when acknowledged (``t``: wall-clock seconds),
``{"event": "failed", "i", "error", "t"}`` per failed attempt, then ``{"event": "summary", "sent"}``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "compat" / "clients" / "v4"))

from common import base_parser, check_namesrv, emit, finish, import_client, start_watchdog

client, errors = import_client()


def main() -> None:
    parser = base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", default="v4")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to keep sending")
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--stop-file", type=Path, help="stop early once this file exists")
    args = parser.parse_args()
    start_watchdog(args.timeout + 15, "steady producing")
    check_namesrv(args.namesrv)
    producer = client.Producer("steady_v4_producer", timeout=3000)
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    deadline = time.monotonic() + args.seconds
    i = 0
    while time.monotonic() < deadline and not (args.stop_file and args.stop_file.exists()):
        body = f"{args.prefix}-{i}"
        message = client.Message(args.topic)
        message.set_body(body)
        message.set_keys(body)
        try:
            status = producer.send_sync(message).status.name
        except errors.RocketMQException as exc:
            status = str(exc)[:200]
        if status != "OK":  # the wrapper's SendStatus.OK (SEND_OK in Java)
            emit("failed", i=i, error=status, t=time.time())
            time.sleep(0.1)
            continue
        emit("sent", i=i, body=body, t=time.time())
        i += 1
        time.sleep(args.interval)
    producer.shutdown()
    emit("summary", sent=i)
    finish(0)


if __name__ == "__main__":
    main()
