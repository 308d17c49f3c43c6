"""Slave acting master with real processes on loopback: broker-a (a master and its slave, both with
enable_slave_acting_master) and broker-b (a master, where the acting slave's puts escape to). One
cluster serves the module's tests, in order; each leaves broker-a's master running and its duties
taken back.

Scheduled messages: the master is SIGKILLed right after it delivered some, before the slave copied
its progress; the slave takes over, delivers what falls due while the master is down (through
broker-b) and none of what the master delivered; restarted, the master takes the duty back and
delivers what falls due later. Every message arrives exactly once.

Transactions: the master ends some (at once, and by a check-back) and is SIGKILLed; the acting slave
checks back only the ones still open, commits through broker-b, is SIGKILLed and restarted, and
neither checks nor commits again what it ended; nor does the master once back.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import time
from collections.abc import Awaitable, Callable

import pytest
import pytest_asyncio

from ferrymq.broker.schedule.timer import TimerCheckpoint
from ferrymq.client import ClientError, LocalTransactionState, Message, PullConsumer, TransactionProducer
from ferrymq.protocol.bodies import TopicConfigSerializeWrapper, decode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.properties import Prop
from tests.faults.classic import SETTLE, ClassicCluster

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600), pytest.mark.asyncio(loop_scope="module")]

ACTING = {
    "FERRYMQ_ENABLE_SLAVE_ACTING_MASTER": "true",
    "FERRYMQ_TRANSACTION_CHECK_INTERVAL": "1000",
    "FERRYMQ_TRANSACTION_TIMEOUT": "1000",
    "FERRYMQ_TRANSACTION_CHECK_MAX": "1000",  # an undecided transaction is asked about all along
}
TOPIC = "ActingTopic"
TX_TOPIC = "TxTopic"
ACTS = "acts for it"
TOOK_BACK = "took the duties back from slave"
HANDED_BACK = "acting duties handed back"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory):
    c = ClassicCluster(tmp_path_factory.mktemp("acting"), "ActingCluster")
    c.add_broker("a-master", "broker-a", ACTING)
    c.add_broker("a-slave", "broker-a", ACTING, slave_id=1)
    c.add_broker("b-master", "broker-b", ACTING)
    try:
        await c.start(c.namesrv)
        for name in c.brokers:
            await c.start(c.brokers[name])
        for broker in ("a-master", "b-master"):
            await c.create_topic(broker, TOPIC)
        await c.create_topic("a-master", TX_TOPIC)  # broker-b gets it once the half messages are sent
        await slave_has_master_log(c, TOPIC)
        yield c
    finally:
        await c.stop()


async def until(what: str, condition: Callable[[], Awaitable[bool] | bool]) -> None:
    """Wait (bounded) until `condition()` holds (it may be a coroutine function)."""
    deadline = time.monotonic() + SETTLE
    while not await _value(condition()):
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.1)


async def slave_has_master_log(c: ClassicCluster, topic: str) -> None:
    """Wait until the slave's log reaches the master's end and it copied the topic (every 10 s)."""

    async def caught_up() -> bool:
        master = int((await c.runtime("a-master"))["commitLogMaxOffset"])
        topics = await c.call("a-slave", RequestCode.GET_ALL_TOPIC_CONFIG)
        copied = decode_body(TopicConfigSerializeWrapper, topics.body).topic_config_table
        return int((await c.runtime("a-slave"))["commitLogMaxOffset"]) >= master and topic in copied

    await until("the slave caught up", caught_up)


async def read_topic(c: ClassicCluster, topic: str, expected: set[str]) -> dict[str, list[str]]:
    """Read `topic` from the start on every group until `expected` is all there (bounded), and a few
    polls more: body → the broker address of each copy read."""
    seen: dict[str, list[str]] = collections.defaultdict(list)
    deadline = time.monotonic() + SETTLE
    async with PullConsumer(
        f"reader-{time.monotonic_ns()}", c.namesrv_addr, consume_from="first"
    ) as consumer:
        await consumer.subscribe(topic)
        idle = 0
        while time.monotonic() < deadline and (not expected <= set(seen) or idle < 3):
            try:
                messages = await consumer.poll(timeout=1.0)
            except ClientError:  # a broker restarting
                await asyncio.sleep(0.5)
                continue
            idle = 0 if messages else idle + 1
            for m in messages:
                seen[m.body.decode()].append(f"{m.store_host[0]}:{m.store_host[1]}")
    return seen


def twice(seen: dict[str, list[str]]) -> dict[str, list[str]]:
    return {body: hosts for body, hosts in seen.items() if len(hosts) > 1}


async def delay_progress(c: ClassicCluster, broker: str, level: int) -> int:
    """The broker's delivery progress of a delay level (a slave's: the one it copied)."""
    return int((await c.runtime(broker))[f"scheduleMessageOffset_{level}"].split(",")[0])


async def timer_low_offset(c: ClassicCluster, broker: str) -> int:
    """The first timer-queue entry the broker's timer has not delivered."""
    response = await c.call(broker, RequestCode.GET_TIMER_CHECK_POINT)
    return decode_body(TimerCheckpoint, response.body).low_offset


async def schedule(
    c: ClassicCluster, label: str, level: int, deliver_ms: int, count: int = 5, topic: str = TOPIC
) -> set[str]:
    """`count` messages at delay `level` and `count` due at `deliver_ms`, sent to broker-a's master."""
    names = set()
    for i in range(count):
        delay, timer = f"delay-{label}-{i}", f"timer-{label}-{i}"
        names |= {delay, timer}
        assert (
            await c.send("a-master", topic, delay.encode(), {Prop.DELAY: str(level)}) == ResponseCode.SUCCESS
        )
        at = {Prop.TIMER_DELIVER_MS: str(deliver_ms)}
        assert await c.send("a-master", topic, timer.encode(), at) == ResponseCode.SUCCESS
    return names


async def test_scheduled_messages_are_delivered_once_across_takeover_and_handback(cluster):
    c = cluster
    master, slave = c.brokers["a-master"], c.brokers["a-slave"]
    now_ms = int(time.time() * 1000)
    copied = await schedule(c, "copied", 1, now_ms + 1000)  # delivered, and copied by the slave
    await until("the master delivered them", lambda: _delivered(c, "a-master", 5))
    await until("the slave copied that", lambda: _copied(c, 5))

    # The slave copies the master's progress every 10 s: it just did. The next ones are delivered
    # by the master and the master is killed before the slave copies that.
    now_ms = int(time.time() * 1000)
    uncopied = await schedule(c, "uncopied", 1, now_ms + 1000)
    soon = await schedule(c, "soon", 3, now_ms + 10_000)  # due while the master is down: 10 s
    later = await schedule(c, "later", 4, now_ms + 35_000)  # due once it is back: 30 s, 35 s
    await until("the master delivered them", lambda: _delivered(c, "a-master", 10))
    await slave_has_master_log(c, TOPIC)
    assert not await _copied(c, 10), "the slave copied the progress: the kill comes too late"
    killed_at = time.monotonic()
    master.kill()

    since = len(slave.log_text())
    await slave.wait_for_line(ACTS, SETTLE, since)
    seen = await read_topic(c, TOPIC, copied | uncopied | soon)
    assert set(seen) == copied | uncopied | soon, sorted(set(seen) ^ (copied | uncopied | soon))
    assert not twice(seen), f"delivered more than once: {twice(seen)}"
    assert int((await c.runtime("a-slave"))["escapedMessages"]) == len(soon)
    b_master = c.addrs["b-master"]
    assert all(seen[body] == [b_master] for body in soon)

    await c.start(master)
    await master.wait_for_line(TOOK_BACK, SETTLE)
    took_back = time.monotonic()
    await slave.wait_for_line(HANDED_BACK, SETTLE, since)
    seen = await read_topic(c, TOPIC, copied | uncopied | soon | later)
    assert set(seen) == copied | uncopied | soon | later
    assert not twice(seen), f"delivered more than once: {twice(seen)}"
    if took_back < killed_at + 25:  # the later ones fell due after the handback: the master's
        assert int((await c.runtime("a-slave"))["escapedMessages"]) == len(soon)
        assert all(seen[body] != [b_master] for body in later)


async def _delivered(c: ClassicCluster, broker: str, per_kind: int) -> bool:
    """Whether the broker delivered `per_kind` level-1 and timer messages."""
    return await delay_progress(c, broker, 1) >= per_kind and await timer_low_offset(c, broker) >= per_kind


async def _copied(c: ClassicCluster, delivered: int) -> bool:
    """Whether the slave's copy of its master's progress has `delivered` level-1 messages delivered
    (it copies the timer's in the same round)."""
    return await delay_progress(c, "a-slave", 1) >= delivered


async def test_transactions_are_ended_once_across_takeover_restart_and_handback(cluster):
    c = cluster
    master, slave = c.brokers["a-master"], c.brokers["a-slave"]
    checks: list[tuple[str, str]] = []  # (body, who asked: the phase of the test)
    phase = "master"

    def checker(msg) -> LocalTransactionState:
        body = msg.body.decode()
        checks.append((body, phase))
        if body == "tx-checked" or (body == "tx-by-slave" and phase != "master"):
            return LocalTransactionState.COMMIT_MESSAGE
        return LocalTransactionState.UNKNOW  # tx-open stays open: it shows that check passes run

    def asked(body: str, in_phase: str) -> int:
        return sum(1 for b, p in checks if (b, p) == (body, in_phase))

    async def send(producer: TransactionProducer, body: str, state: LocalTransactionState) -> None:
        result = await producer.send_message_in_transaction(
            Message(TX_TOPIC, body.encode()), lambda m, a: state
        )
        assert result.message_queue.broker_name == "broker-a"

    async def runtime(broker: str, key: str) -> int:
        return int((await c.runtime(broker))[key])

    async def asked_again(body: str, in_phase: str, times: int) -> bool:
        """Heartbeat (a restarted broker knows no producer, and the first heartbeat may meet the
        connection to the process that died), then whether `body` was asked about `times` times."""
        await producer.instance.refresh_route(TX_TOPIC)  # the acting slave stands in for the master
        await producer.instance.heartbeat_all()
        return asked(body, in_phase) >= times

    async def committed_on_a() -> bool:
        return await runtime("a-master", "transactionCommitted") >= 2

    async with TransactionProducer("tx-group", c.namesrv_addr, checker=checker) as producer:
        await send(producer, "tx-commit", LocalTransactionState.COMMIT_MESSAGE)
        await send(producer, "tx-rollback", LocalTransactionState.ROLLBACK_MESSAGE)
        await send(producer, "tx-checked", LocalTransactionState.UNKNOW)  # the master's check commits it
        await send(producer, "tx-by-slave", LocalTransactionState.UNKNOW)
        await send(producer, "tx-open", LocalTransactionState.UNKNOW)
        await until("the master committed tx-checked", committed_on_a)
        await until("the master asked about tx-by-slave", lambda: asked("tx-by-slave", "master") > 0)
        await c.create_topic("b-master", TX_TOPIC)  # where the acting slave's commits go
        await slave_has_master_log(c, TX_TOPIC)

        phase = "slave"
        master.kill()
        since = len(slave.log_text())
        await slave.wait_for_line(ACTS, SETTLE, since)
        await until("the slave asked about tx-open", lambda: asked_again("tx-open", phase, 2))
        seen = await read_topic(c, TX_TOPIC, {"tx-commit", "tx-checked", "tx-by-slave"})
        assert seen.keys() == {"tx-commit", "tx-checked", "tx-by-slave"}, seen
        assert not twice(seen), twice(seen)
        assert seen["tx-by-slave"] == [c.addrs["b-master"]]
        assert (
            asked("tx-commit", "slave") == asked("tx-rollback", "slave") == asked("tx-checked", "slave") == 0
        )

        phase = "restarted slave"
        slave.kill()
        since = len(slave.log_text())
        await c.start(slave)
        await slave.wait_for_line(ACTS, SETTLE, since)
        await until("the restarted slave asked about tx-open", lambda: asked_again("tx-open", phase, 2))
        assert asked("tx-by-slave", phase) == 0, "the restarted slave asked again about what it committed"

        await c.start(master)
        await master.wait_for_line(TOOK_BACK, SETTLE)  # the slave asks no more from here on
        phase = "master back"
        await until("the master asked about tx-open", lambda: asked_again("tx-open", phase, 2))
        ended = ("tx-commit", "tx-rollback", "tx-checked", "tx-by-slave")
        assert [asked(body, phase) for body in ended] == [0, 0, 0, 0], checks
        seen = await read_topic(c, TX_TOPIC, {"tx-commit", "tx-checked", "tx-by-slave"})
        assert seen.keys() == {"tx-commit", "tx-checked", "tx-by-slave"} and not twice(seen), seen


async def _value(value: Awaitable[bool] | bool) -> bool:
    return await value if inspect.isawaitable(value) else value
