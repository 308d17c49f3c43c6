"""CPU of the ACL work per single send, for instruction counting (callgrind), not wall time.

``python bench/acl_check_cost.py [--count N] [--body BYTES] [--save FILE]`` runs, under
``valgrind --tool=callgrind`` (PYTHONHASHSEED=0), the broker's check (RemotingGate on a signed
SEND_MESSAGE_V2 from a Normal user allowed Pub on its topic) and the client's signing N times and 0
times, and prints the difference of the instruction counts divided by N: the cost of one, without
start-up (bench/README.md has the figures). ``... loop broker|client N BODY`` is one such run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from ferrymq.auth import AuthRegistry, User
from ferrymq.auth.gate import RemotingGate
from ferrymq.auth.model import Acl
from ferrymq.protocol.acl_signing import Credentials
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.headers import SendMessageRequestHeader
from ferrymq.protocol.properties import encode_properties
from ferrymq.protocol.remoting import RemotingCommand

PEER = "127.0.0.1:50000"
REQUESTS = 2000


def send_request(n: int, body: int) -> RemotingCommand:
    """A producer's n-th SEND_MESSAGE_V2 as the client builds it: born time and keys change."""
    header = SendMessageRequestHeader(
        producer_group="PG",
        topic="orders",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=n % 4,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000) + n,
        flag=0,
        properties=encode_properties({"UNIQ_KEY": f"7F0000010001{n:020X}", "WAIT": "true"}),
    )
    return RemotingCommand(
        RequestCode.SEND_MESSAGE_V2, ext_fields=header.to_ext_fields_v2(), body=b"x" * body
    )


def loop(mode: str, count: int, body: int) -> None:
    credentials = Credentials("alice", "alice-secret-key")
    requests = [send_request(n, body) for n in range(REQUESTS)]  # built (and signed) whatever N is
    count = min(count, REQUESTS)
    if mode == "client":
        for request in requests[:count]:
            credentials.sign(request)
        return
    for request in requests:
        credentials.sign(request)
    registry = AuthRegistry()
    registry.create_user(User("alice", "alice-secret-key"))
    registry.put_acl(
        Acl.from_json({"subject": "User:alice", "policies": [{"entries": [
            {"resource": "Topic:orders", "actions": ["Pub"], "decision": "Allow"}]}]}),
        replace=True,
    )  # fmt: skip
    gate = RemotingGate(registry)
    assert gate(PEER, requests[0]) is None  # the first decision is made before counting
    for request in requests[:count]:
        if gate(PEER, request) is not None:
            raise SystemExit("refused")


def instructions(mode: str, count: int, body: int) -> int:
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
         "loop", mode, str(count), str(body)],
        env=os.environ | {"PYTHONHASHSEED": "0"}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    found = re.search(r"refs:\s+([\d,]+)", out.stderr)
    assert found, out.stderr
    return int(found.group(1).replace(",", ""))


def main() -> None:
    if sys.argv[1:2] == ["loop"]:
        loop(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=REQUESTS)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--save", type=Path)
    args = parser.parse_args()
    result: dict[str, object] = {"body_bytes": args.body, "count": args.count, "load": os.getloadavg()}
    for mode in ("broker", "client"):
        per_op = (instructions(mode, args.count, args.body) - instructions(mode, 0, args.body)) / args.count
        result[f"{mode}_instructions"] = round(per_op)
    print(json.dumps(result))
    if args.save:
        args.save.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
