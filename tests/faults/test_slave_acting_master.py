"""Slave acting master with real processes on loopback: broker-a (a master and its slave, both with
enable_slave_acting_master) and broker-b (a master, where the acting slave's puts escape to).

Scheduled messages due while broker-a's master is SIGKILLed are delivered by the slave, through
broker-b; restarted, the master takes the duty back and delivers what falls due later; every message
arrives exactly once. A half transaction left open is checked back by the acting slave, whose
commit lands on broker-b and is not checked or committed again once the master is back.
"""

from __future__ import annotations

import asyncio
import collections
import time

import pytest

from ferrymq.client import ClientError, LocalTransactionState, Message, PullConsumer, TransactionProducer
from ferrymq.protocol.bodies import TopicConfigSerializeWrapper, decode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.properties import Prop
from tests.faults.classic import SETTLE, ClassicCluster

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]

ACTING = {
    "FERRYMQ_ENABLE_SLAVE_ACTING_MASTER": "true",
    "FERRYMQ_TRANSACTION_CHECK_INTERVAL": "1000",
    "FERRYMQ_TRANSACTION_TIMEOUT": "1000",
    "FERRYMQ_SLAVE_SYNC_INTERVAL": "1000",  # the slave copies topics and progress every second
}
TOPIC = "ActingTopic"
ACTS = "acts for it"
TOOK_BACK = "took the duties back from slave"


@pytest.fixture
async def cluster(tmp_path):
    c = ClassicCluster(tmp_path, "ActingCluster")
    c.add_broker("a-master", "broker-a", ACTING)
    c.add_broker("a-slave", "broker-a", ACTING, slave_id=1)
    c.add_broker("b-master", "broker-b", ACTING)
    yield c
    await c.stop()


async def start_all(c: ClassicCluster, *topics: str) -> None:
    await c.start(c.namesrv)
    for name in c.brokers:
        await c.start(c.brokers[name])
    for topic in topics:
        for broker in ("a-master", "b-master"):
            await c.create_topic(broker, topic)


async def slave_has_master_log(c: ClassicCluster, topic: str) -> None:
    """Wait until the slave's log reaches the master's end and it copied the topic (every second)."""
    deadline = time.monotonic() + SETTLE
    while True:
        master = int((await c.runtime("a-master"))["commitLogMaxOffset"])
        topics = await c.call("a-slave", RequestCode.GET_ALL_TOPIC_CONFIG)
        copied = decode_body(TopicConfigSerializeWrapper, topics.body).topic_config_table
        if int((await c.runtime("a-slave"))["commitLogMaxOffset"]) >= master and topic in copied:
            return
        assert time.monotonic() < deadline, "the slave never caught up"
        await asyncio.sleep(0.5)


async def bodies(namesrv: str, topic: str, expected: set[str]) -> collections.Counter[str]:
    """Read `topic` from the start on every group until `expected` is all there (bounded), and a few
    polls more: how often each body was read."""
    seen: collections.Counter[str] = collections.Counter()
    deadline = time.monotonic() + SETTLE
    async with PullConsumer(f"reader-{time.monotonic_ns()}", namesrv, consume_from="first") as consumer:
        await consumer.subscribe(topic)
        idle = 0
        while time.monotonic() < deadline and (not expected <= set(seen) or idle < 3):
            try:
                messages = await consumer.poll(timeout=1.0)
            except ClientError:  # a broker restarting
                await asyncio.sleep(0.5)
                continue
            idle = 0 if messages else idle + 1
            seen.update(m.body.decode() for m in messages)
    return seen


async def test_scheduled_messages_are_delivered_by_the_acting_slave_then_by_the_master_again(cluster):
    c = cluster
    await start_all(c, TOPIC)
    # The slave copies topics every second: the messages are sent once it has, so that none falls due
    # while the master still runs (a takeover re-delivers what the master delivered since the
    # slave's last copy of its progress: docs/ha.md).
    await slave_has_master_log(c, TOPIC)
    now_ms = int(time.time() * 1000)

    async def schedule(names: set[str], label: str, level: int, due_in_ms: int) -> None:
        for i in range(10):
            delay, timer = f"delay-{label}-{i}", f"timer-{label}-{i}"
            names |= {delay, timer}
            code = await c.send("a-master", TOPIC, delay.encode(), {Prop.DELAY: str(level)})
            assert code == ResponseCode.SUCCESS
            at = {Prop.TIMER_DELIVER_MS: str(now_ms + due_in_ms)}
            assert await c.send("a-master", TOPIC, timer.encode(), at) == ResponseCode.SUCCESS

    soon: set[str] = set()
    later: set[str] = set()
    # The master is killed at once and its slave acts within a second; the master is back with its
    # duties some 11 s after these sends (a loaded two-core machine).
    await schedule(soon, "soon", 2, 6_000)  # due while the master is down: 5 s, 6 s
    await schedule(later, "later", 4, 32_000)  # due once it is back: 30 s, 32 s
    await slave_has_master_log(c, TOPIC)

    master, slave = c.brokers["a-master"], c.brokers["a-slave"]
    master.kill()
    await slave.wait_for_line(ACTS, SETTLE)
    seen = await bodies(c.namesrv_addr, TOPIC, soon)
    assert set(seen) == soon, sorted(set(seen) ^ soon)  # the soon ones, and none of the later ones yet
    assert int((await c.runtime("a-slave"))["escapedMessages"]) == len(soon)

    await c.start(master)
    await master.wait_for_line(TOOK_BACK, SETTLE)
    await slave.wait_for_line("acting duties handed back", SETTLE)
    seen = await bodies(c.namesrv_addr, TOPIC, soon | later)
    assert set(seen) == soon | later
    twice = {body: n for body, n in seen.items() if n > 1}
    assert not twice, f"delivered more than once: {twice}"
    assert int((await c.runtime("a-slave"))["escapedMessages"]) == len(soon)  # the later ones: the master's


async def test_half_transaction_is_checked_back_by_the_acting_slave(cluster):
    c = cluster
    await start_all(c)
    await c.create_topic("a-master", "TxTopic")  # only on broker-a, so the half message goes there
    undecided = TransactionProducer("tx-group", c.namesrv_addr)
    async with undecided:
        result = await undecided.send_message_in_transaction(
            Message("TxTopic", b"open-transaction"), lambda msg, arg: LocalTransactionState.UNKNOW
        )
    assert result.message_queue.broker_name == "broker-a"
    await c.create_topic("b-master", "TxTopic")  # where the acting slave's commit goes
    await slave_has_master_log(c, "TxTopic")

    master, slave = c.brokers["a-master"], c.brokers["a-slave"]
    master.kill()
    await slave.wait_for_line(ACTS, SETTLE)
    checks: list[str] = []

    def checker(msg) -> LocalTransactionState:
        checks.append(msg.body.decode())
        return LocalTransactionState.COMMIT_MESSAGE

    async with TransactionProducer("tx-group", c.namesrv_addr, checker=checker) as producer:
        await producer.instance.route("TxTopic")  # it heartbeats the route's masters: the acting slave
        await producer.instance.heartbeat_all()
        seen = await bodies(c.namesrv_addr, "TxTopic", {"open-transaction"})
        assert seen == {"open-transaction": 1}
        assert (await c.runtime("a-slave"))["transactionCommitted"] == "1"

        await c.start(master)
        await master.wait_for_line(TOOK_BACK, SETTLE)
        asked = len(checks)
        await asyncio.sleep(3.0)  # three check-back passes of the master: none may ask again
        assert len(checks) == asked, checks
        seen = await bodies(c.namesrv_addr, "TxTopic", {"open-transaction"})
        assert seen == {"open-transaction": 1}
