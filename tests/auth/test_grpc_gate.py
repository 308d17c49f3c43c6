"""The proxy's check of RocketMQ 5 signed calls, without a server: signature, clock skew, rules."""

from __future__ import annotations

import hashlib
import hmac
import time

import grpc
import pytest

from ferrymq.auth import Acl, AuthRegistry, PolicyEntry, Resource, User
from ferrymq.auth.grpc_gate import GrpcGate, Refused
from ferrymq.auth.model import Action
from ferrymq.proxy.v2 import messaging_pb2 as pb


def signed(ak: str, sk: str, when: float, *, upper: bool = False) -> dict[str, str]:
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when))
    sig = hmac.new(sk.encode(), date.encode(), hashlib.sha1).hexdigest()
    sig = sig.upper() if upper else sig
    header = f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}"
    return {"authorization": header, "x-mq-date-time": date}


@pytest.fixture
def gate() -> GrpcGate:
    registry = AuthRegistry()
    registry.create_user(User("app", "app-secret"))
    registry.put_acl(
        Acl("app", (PolicyEntry(Resource.topic("Orders"), frozenset({Action.PUB})),)), replace=False
    )
    return GrpcGate(registry, max_skew_s=300)


def send(topic: str) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=topic))])


def refusal(gate: GrpcGate, method: str, request, metadata: dict[str, str]) -> grpc.StatusCode | None:
    try:
        gate.check(method, request, metadata, "ipv4:127.0.0.1:5000")
    except Refused as e:
        return e.status
    return None


def test_signatures_skew_and_rules(gate):
    now = time.time()
    assert refusal(gate, "SendMessage", send("Orders"), signed("app", "app-secret", now)) is None
    assert (
        refusal(gate, "SendMessage", send("Orders"), signed("app", "app-secret", now - 200, upper=True))
        is None
    )
    unauthenticated = grpc.StatusCode.UNAUTHENTICATED
    assert (
        refusal(gate, "SendMessage", send("Orders"), signed("app", "app-secret", now - 3600))
        is unauthenticated
    )
    assert refusal(gate, "SendMessage", send("Orders"), signed("app", "nope", now)) is unauthenticated
    assert refusal(gate, "SendMessage", send("Orders"), signed("eve", "x", now)) is unauthenticated
    assert refusal(gate, "SendMessage", send("Orders"), {}) is unauthenticated
    assert refusal(gate, "SendMessage", send("Orders"), {"authorization": "Basic x"}) is unauthenticated
    denied = grpc.StatusCode.PERMISSION_DENIED
    assert refusal(gate, "SendMessage", send("Payments"), signed("app", "app-secret", now)) is denied
    receive = pb.ReceiveMessageRequest(
        group=pb.Resource(name="Billing"), message_queue=pb.MessageQueue(topic=pb.Resource(name="Orders"))
    )
    assert refusal(gate, "ReceiveMessage", receive, signed("app", "app-secret", now)) is denied
    gate.max_skew_s = 0  # RocketMQ's own proxy does not look at the time
    assert refusal(gate, "SendMessage", send("Orders"), signed("app", "app-secret", now - 86400)) is None
