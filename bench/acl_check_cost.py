"""CPU of the ACL work per single send, for instruction counting (callgrind), not wall time.

``python bench/acl_check_cost.py broker|client N`` runs the broker's check (RemotingGate on a
signed SEND_MESSAGE_V2 from a Normal user allowed Pub on its topic) or the client's signing N
times; run it under ``valgrind --tool=callgrind`` with N and with 0, and divide the difference of
the instruction counts by N (bench/README.md has the figures).
"""

from __future__ import annotations

import sys
import time

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


def send_request(n: int) -> RemotingCommand:
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
    return RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields=header.to_ext_fields_v2(), body=b"x" * 128)


def main() -> None:
    mode, count = sys.argv[1], int(sys.argv[2])
    credentials = Credentials("alice", "alice-secret-key")
    requests = [send_request(n) for n in range(REQUESTS)]  # built (and signed) whatever N is
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


if __name__ == "__main__":
    main()
