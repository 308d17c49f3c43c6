"""The registry of live gRPC clients and the relay of brokers' requests to them, with no socket: a
local message service over a broker's client registry, and the streams' outboxes read directly."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.broker.clients import ClientRegistry
from ferrymq.messaging.local import LocalMessageService
from ferrymq.protocol.bodies import ConsumeMessageDirectlyResult, ConsumerRunningInfo, decode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import (
    CheckTransactionStateRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
)
from ferrymq.protocol.message_ext import MessageExt
from ferrymq.protocol.message_id import offset_msg_id
from ferrymq.protocol.properties import Prop
from ferrymq.protocol.record import pack_host
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.proxy.clients import LiveClients
from ferrymq.proxy.relay import Relay
from ferrymq.proxy.transactions import half_message
from ferrymq.proxy.v2 import messaging_pb2 as pb

BROKER = "broker-a"


@pytest.fixture
def service() -> LocalMessageService:
    """Registration alone uses the broker's client registry (no store, no other service)."""
    return LocalMessageService(None, None, None, None, BROKER, None, ClientRegistry())  # type: ignore[arg-type]


@pytest.fixture
def clients(service) -> LiveClients:
    return LiveClients(service)


def producer(*topics: str) -> pb.Settings:
    return pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=t) for t in topics])
    )


def consumer(group: str, topic: str, expression: str = "*", kind=pb.SIMPLE_CONSUMER) -> pb.Settings:
    entry = pb.SubscriptionEntry(
        topic=pb.Resource(name=topic), expression=pb.FilterExpression(type=pb.TAG, expression=expression)
    )
    subscription = pb.Subscription(group=pb.Resource(name=group), subscriptions=[entry])
    return pb.Settings(client_type=kind, subscription=subscription)


async def test_settings_put_a_client_in_its_groups_and_its_last_stream_ending_takes_it_out(service, clients):
    registry = service.clients
    first = clients.open("c1")
    second = clients.open("c1")  # a client may open one stream per endpoint
    await clients.settle("c1", consumer("Billing", "Orders", "new || paid"))
    assert registry.consumer_ids("Billing") == ["c1"]
    sub = registry.subscription("Billing", "Orders")
    assert (sub.sub_string, sub.tags_set, sub.expression_type) == ("new || paid", ["new", "paid"], "TAG")
    clients.open("p1")
    await clients.settle("p1", producer("Orders", "Refunds"))
    assert sorted(registry.producers["Orders"]) == sorted(registry.producers["Refunds"]) == ["p1"]
    assert clients.stream_ended("c1", first) is None
    assert registry.consumer_ids("Billing") == ["c1"]
    await asyncio.wait_for(clients.stream_ended("c1", second), 5)
    assert registry.consumer_ids("Billing") == []
    await asyncio.wait_for(clients.forget("p1"), 5)  # NotifyClientTermination
    assert registry.producers["Orders"] == {} and clients.get("p1") is None
    await clients.close()


async def test_new_settings_move_a_client_out_of_the_groups_it_left(service, clients):
    clients.open("c1")
    await clients.settle("c1", consumer("Old", "Orders"))
    await clients.settle("c1", consumer("New", "Orders", kind=pb.PUSH_CONSUMER))
    assert service.clients.consumer_ids("Old") == []
    assert service.clients.consumer_ids("New") == ["c1"]
    assert service.clients.consumers["New"].consume_type == "CONSUME_PASSIVELY"


def check_request(group: str, uniq: str = "UNIQ-1") -> tuple[RemotingCommand, str]:
    """A broker's CHECK_TRANSACTION_STATE for a half message of `group` (copy at queue offset 7)."""
    properties = {Prop.PGROUP: group, Prop.UNIQ_KEY: uniq, Prop.TRAN_MSG: "true", Prop.TAGS: "t"}
    record = MessageExt("Transfers", b"kept", properties, queue_id=1, queue_offset=7, commitlog_offset=4096)
    offset_id = offset_msg_id(pack_host("127.0.0.1", 10911), 4096)
    header = CheckTransactionStateRequestHeader(
        tran_state_table_offset=7, commit_log_offset=4096, topic="Transfers", msg_id=uniq,
        offset_msg_id=offset_id,
    )  # fmt: skip
    command = RemotingCommand(
        RequestCode.CHECK_TRANSACTION_STATE, ext_fields=header.to_ext_fields(), body=record.encode()
    )
    return command, offset_id


async def test_a_check_goes_to_a_live_producer_of_the_group_as_a_recovery_command(clients):
    relay = Relay(clients)
    outbox = clients.open("p1")
    await clients.settle("p1", producer("Transfers"))
    request, offset_id = check_request("Transfers")
    assert await relay(BROKER, request) is None  # oneway: the answer comes as EndTransaction
    recover = outbox.get_nowait().recover_orphaned_transaction_command
    message = recover.message
    assert (message.topic.name, message.body, message.system_properties.message_id) == (
        "Transfers", b"kept", "UNIQ-1"
    )  # fmt: skip
    assert recover.message.system_properties.message_type == pb.TRANSACTION
    half = half_message(recover.transaction_id)  # what EndTransaction will end
    assert half is not None
    assert (half.broker_name, half.queue_id, half.queue_offset, half.msg_id) == (BROKER, 1, 7, offset_id)


async def test_a_check_for_a_group_without_a_live_producer_is_left_to_the_next_check(clients):
    relay = Relay(clients)
    outbox = clients.open("p1")
    await clients.settle("p1", producer("Other"))
    assert not relay.check_transaction(BROKER, check_request("Transfers")[0])
    assert outbox.empty()


def running_info_request(client_id: str) -> RemotingCommand:
    header = GetConsumerRunningInfoRequestHeader(
        consumer_group="Billing", client_id=client_id, jstack_enable=True
    )
    return RemotingCommand(RequestCode.GET_CONSUMER_RUNNING_INFO, ext_fields=header.to_ext_fields())


async def test_running_info_carries_the_stack_trace_the_client_answers_with(clients):
    relay = Relay(clients)
    outbox = clients.open("c1")
    await clients.settle("c1", consumer("Billing", "Orders"))
    asking = asyncio.ensure_future(relay(BROKER, running_info_request("c1")))
    nonce = (await asyncio.wait_for(outbox.get(), 5)).print_thread_stack_trace_command.nonce
    trace = pb.ThreadStackTrace(nonce=nonce, thread_stack_trace="main: waiting")
    relay.answered("c2", pb.TelemetryCommand(thread_stack_trace=trace))  # not the client asked: ignored
    assert not asking.done()
    relay.answered("c1", pb.TelemetryCommand(thread_stack_trace=trace))
    answer = await asyncio.wait_for(asking, 5)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    info = decode_body(ConsumerRunningInfo, answer.body)
    assert info.jstack == "main: waiting"
    assert [s.topic for s in info.subscription_set] == ["Orders"]


async def test_a_client_that_never_answers_or_is_not_there_gets_a_clear_error(clients):
    relay = Relay(clients, answer_timeout_s=0.05)
    clients.open("c1")
    await clients.settle("c1", consumer("Billing", "Orders"))
    silent = await relay(BROKER, running_info_request("c1"))
    assert silent.code == ResponseCode.SYSTEM_ERROR and "did not answer within 0.05 s" in silent.remark
    missing = await relay(BROKER, running_info_request("nobody"))
    assert missing.code == ResponseCode.SYSTEM_ERROR and "nobody is not online" in missing.remark


FAILED = pb.Status(code=pb.FAILED_TO_CONSUME_MESSAGE, message="boom")


@pytest.mark.parametrize(
    ("status", "result"), [(pb.Status(code=pb.OK), "CR_SUCCESS"), (FAILED, "CR_THROW_EXCEPTION")]
)
async def test_consume_directly_verifies_the_message_with_the_client(clients, status, result):
    relay = Relay(clients)
    outbox = clients.open("c1")
    await clients.settle("c1", consumer("Billing", "Orders"))
    header = ConsumeMessageDirectlyResultRequestHeader(consumer_group="Billing", client_id="c1", msg_id="X")
    record = MessageExt("Orders", b"check me", {Prop.UNIQ_KEY: "U2"})
    request = RemotingCommand(
        RequestCode.CONSUME_MESSAGE_DIRECTLY, ext_fields=header.to_ext_fields(), body=record.encode()
    )
    asking = asyncio.ensure_future(relay(BROKER, request))
    verify = (await asyncio.wait_for(outbox.get(), 5)).verify_message_command
    assert (verify.message.body, verify.message.system_properties.message_id) == (b"check me", "U2")
    done = pb.TelemetryCommand(
        status=status, verify_message_result=pb.VerifyMessageResult(nonce=verify.nonce)
    )
    relay.answered("c1", done)
    answer = await asyncio.wait_for(asking, 5)
    assert answer.code == ResponseCode.SUCCESS
    assert decode_body(ConsumeMessageDirectlyResult, answer.body).consume_result == result


async def test_a_rebalance_notice_needs_no_answer(clients):
    """5.x consumers get their queues from the proxy: the brokers' notice of a group change to the
    members they know (which include the proxy's clients) is taken and dropped."""
    notice = RemotingCommand(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields={"consumerGroup": "Billing"})
    assert await Relay(clients)(BROKER, notice) is None
