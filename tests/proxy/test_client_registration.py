"""gRPC clients as the brokers see them, local and cluster mode: a 5.x consumer is in its group's
consumer list while it lives and leaves it when it shuts down; an orphaned transaction of a 5.x
producer is checked back through its Telemetry stream and its checker's answer holds; a broker's
GET_CONSUMER_RUNNING_INFO reaches the client's stream and carries its stack trace back (or says
that the client did not answer), and CONSUME_MESSAGE_DIRECTLY has the client verify a stored message."""

from __future__ import annotations

import queue
import threading
import time

import grpc
import pytest

from ferrymq.protocol.bodies import (
    ConsumeMessageDirectlyResult,
    ConsumerConnection,
    ConsumerRunningInfo,
    GetConsumerListByGroupResponseBody,
    KVTable,
    ProducerConnection,
    decode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import SendMessageRequestHeader
from ferrymq.proxy.v2 import messaging_pb2 as pb
from ferrymq.proxy.v2 import messaging_pb2_grpc as pb_grpc
from tests.compat.conftest import remoting_call, wait_until

pytestmark = pytest.mark.compat

CHECK_BACK_WAIT_S = 30.0  # with fast_checks, a half message older than 1 s is checked every second


@pytest.fixture
def fast_checks(monkeypatch):
    """Brokers started after this (`ferrymq broker` and `ferrymq dev` read FERRYMQ_* settings) check
    half messages every second."""
    monkeypatch.setenv("FERRYMQ_TRANSACTION_CHECK_INTERVAL", "1000")
    monkeypatch.setenv("FERRYMQ_TRANSACTION_TIMEOUT", "1000")


def consumer_ids(broker: str, group: str) -> list[str]:
    reply = remoting_call(broker, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    if reply.code != ResponseCode.SUCCESS:  # a group without members
        return []
    return decode_body(GetConsumerListByGroupResponseBody, reply.body).consumer_id_list


def running_info(broker: str, group: str, client_id: str):
    fields = {"consumerGroup": group, "clientId": client_id, "jstackEnable": "true"}
    return remoting_call(broker, RequestCode.GET_CONSUMER_RUNNING_INFO, fields, timeout=15)


def test_a_consumer_is_in_its_groups_list_while_it_lives_and_leaves_it_on_shutdown(proxied, client):
    proxied.create_topic("Ledger")
    client.ok("consumer", group="Bookkeepers", topic="Ledger", await_s=5)
    me = client.ok("client_id", of="consumer")["client_id"]
    wait_until(lambda: me in consumer_ids(proxied.broker, "Bookkeepers"), 30, lambda: f"{me} listed")
    reply = remoting_call(
        proxied.broker, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "Bookkeepers"}
    )
    connections = decode_body(ConsumerConnection, reply.body)
    assert [c.client_id for c in connections.connection_set] == [me]
    assert connections.subscription_table["Ledger"].sub_string == "*"
    # the 5.x Python client ignores PrintThreadStackTraceCommand: the broker hears that it said nothing
    silent = running_info(proxied.broker, "Bookkeepers", me)
    assert silent.code == ResponseCode.SYSTEM_ERROR and "did not answer" in (silent.remark or ""), (
        silent.remark
    )
    client.ok("shutdown", of="consumer")
    assert consumer_ids(proxied.broker, "Bookkeepers") == []  # termination unregisters before it returns
    gone = running_info(proxied.broker, "Bookkeepers", me)
    assert gone.code == ResponseCode.SYSTEM_ERROR and "not online" in (gone.remark or ""), gone.remark


def producer_ids(broker: str, group: str) -> list[str]:
    reply = remoting_call(broker, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group})
    if reply.code != ResponseCode.SUCCESS:  # a group without members
        return []
    return [c.client_id for c in decode_body(ProducerConnection, reply.body).connection_set]


def test_a_producer_is_in_the_group_of_each_topic_it_publishes_while_it_lives(proxied, client):
    """Sends through the proxy name the topic as their producer group, so that is where the broker
    looks for a producer to check a transaction with."""
    proxied.create_topic("Ledger")
    proxied.create_topic("Journal")
    client.ok("producer", topics=["Ledger", "Journal"])
    me = client.ok("client_id", of="producer")["client_id"]

    def in_both() -> bool:
        return producer_ids(proxied.broker, "Ledger") == producer_ids(proxied.broker, "Journal") == [me]

    wait_until(in_both, 30, lambda: f"{me} in groups Ledger and Journal")
    client.ok("shutdown", of="producer")
    assert producer_ids(proxied.broker, "Ledger") == producer_ids(proxied.broker, "Journal") == []


def test_an_orphaned_transaction_is_checked_back_and_the_checkers_answer_holds(fast_checks, proxied, client):
    proxied.create_topic("Escrow", 1, "TRANSACTION")
    client.ok("consumer", group="Settlers", topic="Escrow", await_s=5)
    assert client.ok("receive", max=16, invisible_s=30)["messages"] == []  # the group reads from here on
    client.ok("producer", topics=["Escrow"])
    kept = client.ok("send", topic="Escrow", body="kept", transaction="open", check="commit")["id"]
    dropped = client.ok("send", topic="Escrow", body="dropped", transaction="open", check="rollback")["id"]
    got: list[dict] = []
    deadline = time.monotonic() + CHECK_BACK_WAIT_S

    def both_checked() -> bool:
        return {"kept", "dropped"} <= set(client.ok("checks")["bodies"])

    while not (kept in [m["id"] for m in got] and both_checked()) and time.monotonic() < deadline:
        got += client.ok("receive", max=16, invisible_s=30)["messages"]
    checked = client.ok("checks")["bodies"]
    assert {"kept", "dropped"} <= set(checked), f"checked {checked}\n{proxied.describe()}"
    client.ok(
        "send", topic="Escrow", body="after", transaction="commit"
    )  # once it is here, a rolled-back one would be too
    while "after" not in [m["body"] for m in got] and time.monotonic() < deadline:
        got += client.ok("receive", max=16, invisible_s=30)["messages"]
    assert sorted(m["body"] for m in got) == ["after", "kept"], proxied.describe()
    assert dropped not in [m["id"] for m in got]
    wait_until(
        lambda: transactions_ended(proxied.broker) == ("2", "1"), 30, lambda: "the rollback to be done"
    )


def transactions_ended(broker: str) -> tuple[str | None, str | None]:
    """(committed, rolled back) as the broker counts them."""
    table = decode_body(KVTable, remoting_call(broker, RequestCode.GET_BROKER_RUNTIME_INFO, {}).body).table
    return table.get("transactionCommitted"), table.get("transactionRolledBack")


class RawClient:
    """A gRPC client of our own stubs that answers PrintThreadStackTraceCommand and
    VerifyMessageCommand (which the 5.x Python client ignores), remembering the messages verified."""

    def __init__(self, proxy: str, client_id: str) -> None:
        self.channel = grpc.insecure_channel(proxy)
        self.outgoing: queue.Queue[pb.TelemetryCommand | None] = queue.Queue()
        self.received: queue.Queue[pb.TelemetryCommand] = queue.Queue()
        self.verified: list[pb.Message] = []
        stub = pb_grpc.MessagingServiceStub(self.channel)
        self.stream = stub.Telemetry(iter(self.outgoing.get, None), metadata=(("x-mq-client-id", client_id),))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        ok = pb.Status(code=pb.OK)
        try:
            for command in self.stream:
                if command.HasField("print_thread_stack_trace_command"):
                    nonce = command.print_thread_stack_trace_command.nonce
                    trace = pb.ThreadStackTrace(nonce=nonce, thread_stack_trace="main: consuming Ledger")
                    self.outgoing.put(pb.TelemetryCommand(status=ok, thread_stack_trace=trace))
                elif command.HasField("verify_message_command"):
                    self.verified.append(command.verify_message_command.message)
                    result = pb.VerifyMessageResult(nonce=command.verify_message_command.nonce)
                    self.outgoing.put(pb.TelemetryCommand(status=ok, verify_message_result=result))
                self.received.put(command)
        except grpc.RpcError:  # cancelled when the test closes it
            pass

    def close(self) -> None:
        self.outgoing.put(None)
        self.stream.cancel()
        self.channel.close()


def stored_message_id(broker: str, topic: str, body: bytes) -> str:
    """Send one message straight to the broker; its offset message id."""
    header = SendMessageRequestHeader(
        producer_group="Tellers", topic=topic, default_topic="TBW102", default_topic_queue_nums=4, queue_id=0,
        sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0,
    )  # fmt: skip
    reply = remoting_call(broker, RequestCode.SEND_MESSAGE_V2, header.to_ext_fields_v2(), body=body)
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    return reply.ext_fields["msgId"]


def test_running_info_and_consume_directly_reach_the_client_and_bring_its_answers(proxied):
    proxied.create_topic("Ledger")
    raw = RawClient(proxied.proxy, "raw-consumer-1")
    try:
        entry = pb.SubscriptionEntry(
            topic=pb.Resource(name="Ledger"), expression=pb.FilterExpression(expression="*")
        )
        settings = pb.Settings(
            client_type=pb.SIMPLE_CONSUMER,
            subscription=pb.Subscription(group=pb.Resource(name="Auditors"), subscriptions=[entry]),
        )
        raw.outgoing.put(pb.TelemetryCommand(settings=settings))
        assert raw.received.get(timeout=30).HasField("settings")
        wait_until(
            lambda: consumer_ids(proxied.broker, "Auditors") == ["raw-consumer-1"], 30, lambda: "it listed"
        )
        answer = running_info(proxied.broker, "Auditors", "raw-consumer-1")
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        info = decode_body(ConsumerRunningInfo, answer.body)
        assert info.jstack == "main: consuming Ledger"
        assert [s.topic for s in info.subscription_set] == ["Ledger"]

        msg_id = stored_message_id(proxied.broker, "Ledger", b"audit me")
        fields = {"consumerGroup": "Auditors", "clientId": "raw-consumer-1", "msgId": msg_id}
        answer = remoting_call(proxied.broker, RequestCode.CONSUME_MESSAGE_DIRECTLY, fields, timeout=15)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert decode_body(ConsumeMessageDirectlyResult, answer.body).consume_result == "CR_SUCCESS"
        assert [(m.topic.name, m.body) for m in raw.verified] == [("Ledger", b"audit me")]
    finally:
        raw.close()
    # its stream lost, the proxy unregisters it
    wait_until(lambda: consumer_ids(proxied.broker, "Auditors") == [], 30, lambda: "it unlisted")
