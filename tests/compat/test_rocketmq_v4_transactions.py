"""Transactional messages seen by PyPI rocketmq==0.4.4 (C++ 4.x client).

That client has no transaction producer (shared/reference/real-clients.md), so the SDK's
TransactionProducer sends through the same broker and the real client consumes: it must get the
committed messages, as ordinary messages, and never a rolled-back or still-open one.
"""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.client import LocalTransactionState, Message, TransactionProducer

from .test_rocketmq_v4 import WAIT, first_deliveries

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

KINDS = {
    "commit": LocalTransactionState.COMMIT_MESSAGE,
    "rollback": LocalTransactionState.ROLLBACK_MESSAGE,
    "open": LocalTransactionState.UNKNOW,  # no checker: stays a half message
}


async def send_transactions(namesrv: str, topic: str, count: int) -> None:
    async with TransactionProducer("tx_compat", namesrv) as producer:
        for i in range(count):
            kind = list(KINDS)[i % 3]
            await producer.send_message_in_transaction(
                Message(topic, f"{kind}-{i}".encode(), keys=[f"k{i}"]), lambda m, a: KINDS[a], kind
            )


def test_real_consumer_gets_committed_transactional_messages_only(v4, cluster):
    asyncio.run(send_transactions(cluster.namesrv, "TxTopic", 15))
    committed = {f"commit-{i}" for i in range(0, 15, 3)}

    cluster.queue_count("TxTopic")
    consumer = v4.consumer(
        "TxTopic", "tx_readers", label="reader", properties=("PGROUP",), count=len(committed), timeout=WAIT
    )
    consumer.wait_exit()
    received = first_deliveries(consumer.messages)
    assert received.keys() == committed
    for body, message in received.items():
        assert (message["topic"], message["keys"], message["properties"]) == (
            "TxTopic", f"k{body.split('-')[1]}", {"PGROUP": "tx_compat"}
        )  # fmt: skip
