"""Slave acting master, the two ways a message could be delivered twice, with real processes: broker-a
(a master, and a slave replicating through a relay the test can freeze and cut) and broker-b (where
the acting slave's puts escape to).

The master's unreplicated tail: messages the slave has fall due while its replication is stalled;
the master would deliver them (consumers may read that copy at once) and die before the slave has
the deliveries, and the slave would deliver them again. With intents the master waits for its slave
to know what it is about to deliver, and the slave delivers what it knows the master did not.

The handback lost with the master: the returning master adopts what the slave did while acting and
is SIGKILLed before it saved that (the slave stopped meanwhile, so that it does not act again and
keep its progress that way); back once more, the master must still not deliver what the slave did.

A commit the slave never got: the master's check-back is answered COMMIT while the slave's
replication is stalled; the master would store the committed message (consumers may read it at once)
and die; the acting slave would ask the producer again and commit a second time through broker-b.
With intents the master commits only once its slave knows it is about to.

The master here waits for its stalled slave as long as the test needs (a slave that does not
acknowledge an intent in `slave_acting_intent_timeout` is otherwise left out: the default is 3 s).
"""

from __future__ import annotations

import time

import pytest
import pytest_asyncio

from ferrymq.bench.processes import free_port
from ferrymq.client import LocalTransactionState, Message, TransactionProducer
from ferrymq.protocol.bodies import ClusterInfo, decode_body
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.remoting import RemotingCommand
from tests.faults.classic import SETTLE, ClassicCluster
from tests.faults.link import Link
from tests.faults.test_slave_acting_master import (
    ACTING,
    ACTS,
    TOOK_BACK,
    delay_progress,
    read_topic,
    schedule,
    timer_low_offset,
    twice,
    until,
)

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600), pytest.mark.asyncio(loop_scope="module")]

TAIL_TOPIC, HANDBACK_TOPIC = "TailTopic", "HandbackTopic"
WAITS = "scheduled delivery waits"  # the master's line when its slave does not acknowledge an intent
TX_WAITS = "transaction commit waits"
RECLAIMED = "master duties (scheduled messages, transaction check-backs) are this broker's"
TX_TOPIC = "TailTxTopic"
PATIENT = {"FERRYMQ_SLAVE_ACTING_INTENT_TIMEOUT": "600000"}  # ms: the master waits for its stalled slave


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory):
    c = ClassicCluster(tmp_path_factory.mktemp("tail"), "TailCluster")
    link = await relayed_group(c, PATIENT)
    c.add_broker("b-master", "broker-b", ACTING)
    try:
        await c.start(c.namesrv)
        for name in c.brokers:
            await c.start(c.brokers[name])
        for topic in (TAIL_TOPIC, HANDBACK_TOPIC):
            for broker in ("a-master", "b-master"):
                await c.create_topic(broker, topic)
        await c.create_topic("a-master", TX_TOPIC)  # broker-b gets it once the half messages are sent
        yield c, link
    finally:
        await c.stop()
        await link.close()


async def relayed_group(c: ClassicCluster, master_settings: dict[str, str]) -> Link:
    """Add broker-a: a master (with `master_settings`) and its slave, which replicates through a relay
    the test can freeze and cut (returned, listening)."""
    ha_port = free_port()
    link = Link(f"127.0.0.1:{ha_port}")
    relay = await link.start()
    master = {**ACTING, **master_settings, "FERRYMQ_HA_LISTEN_PORT": str(ha_port)}
    c.add_broker("a-master", "broker-a", master)
    c.add_broker("a-slave", "broker-a", {**ACTING, "FERRYMQ_HA_MASTER_ADDRESS": relay}, slave_id=1)
    return link


async def master_listed(c: ClassicCluster) -> bool:
    request = RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO)
    info = decode_body(ClusterInfo, (await c.client.invoke(c.namesrv_addr, request, 5.0)).body)
    group = info.broker_addr_table.get("broker-a")
    return group is not None and group.broker_addrs.get(0) == c.addrs["a-master"]


async def slave_caught_up(c: ClassicCluster) -> bool:
    master = int((await c.runtime("a-master"))["commitLogMaxOffset"])
    return int((await c.runtime("a-slave"))["commitLogMaxOffset"]) >= master


async def test_a_delivery_the_slave_never_got_is_not_made_again(cluster):
    c, link = cluster
    master, slave = c.brokers["a-master"], c.brokers["a-slave"]
    now_ms = int(time.time() * 1000)
    due = await schedule(c, "tail", 3, now_ms + 10_000, topic=TAIL_TOPIC)  # 10 s
    later = await schedule(c, "later", 4, now_ms + 30_000, topic=TAIL_TOPIC)  # 30 s: the slave's
    await until("the slave has them", lambda: slave_caught_up(c))
    link.freeze()
    assert time.time() * 1000 < now_ms + 9000, "the freeze comes too late"
    since = len(master.log_text())

    async def delivered_or_waiting() -> bool:
        if WAITS in master.log_text()[since:]:
            return True
        return await delay_progress(c, "a-master", 3) >= 5 and await timer_low_offset(c, "a-master") >= 5

    await until("the master delivered the due ones or waits for its slave", delivered_or_waiting)
    master.kill()
    link.cut()
    slave_since = len(slave.log_text())
    await slave.wait_for_line(ACTS, SETTLE, slave_since)
    seen = await read_topic(c, TAIL_TOPIC, due | later)
    assert set(seen) == due | later, sorted(set(seen) ^ (due | later))

    since = len(master.log_text())
    await c.start(master)
    await master.wait_for_line(RECLAIMED, SETTLE, since)
    seen = await read_topic(c, TAIL_TOPIC, due | later)
    assert set(seen) == due | later, sorted(set(seen) ^ (due | later))
    assert not twice(seen), f"delivered more than once: {twice(seen)}"


async def test_a_handback_the_master_did_not_save_is_handed_back_again(cluster):
    c, _ = cluster
    master, slave = c.brokers["a-master"], c.brokers["a-slave"]
    now_ms = int(time.time() * 1000)
    escaped = await schedule(c, "escaped", 3, now_ms + 10_000, topic=HANDBACK_TOPIC)  # 10 s
    await until("the slave has them", lambda: slave_caught_up(c))
    master.kill()
    slave_since = len(slave.log_text())
    await slave.wait_for_line(ACTS, SETTLE, slave_since)
    seen = await read_topic(c, HANDBACK_TOPIC, escaped)  # delivered by the slave, through broker-b
    assert set(seen) == escaped and all(hosts == [c.addrs["b-master"]] for hosts in seen.values()), seen

    since = len(master.log_text())
    await c.start(master)
    await master.wait_for_line(TOOK_BACK, SETTLE, since)
    master.pause()  # before it saved what it took back (it saves progress every 0.5 s) ...
    slave.pause()  # ... and the slave, so that it does not act (again) while the master is away
    master.kill()
    since = len(master.log_text())
    await c.start(master)
    await until("the master is listed again", lambda: master_listed(c))
    slave.resume()  # it sees the master listed, and is asked for the duties
    await master.wait_for_line(RECLAIMED, SETTLE, since)
    seen = await read_topic(c, HANDBACK_TOPIC, escaped)
    assert set(seen) == escaped
    assert not twice(seen), f"delivered more than once: {twice(seen)}"


async def test_a_commit_the_slave_never_got_is_not_made_again(cluster):
    c, link = cluster
    master, slave = c.brokers["a-master"], c.brokers["a-slave"]
    frozen = False

    def checker(msg) -> LocalTransactionState:  # COMMIT once the slave can no longer copy it
        return LocalTransactionState.COMMIT_MESSAGE if frozen else LocalTransactionState.UNKNOW

    async with TransactionProducer("tail-tx", c.namesrv_addr, checker=checker) as producer:
        bodies = {f"tx-tail-{i}" for i in range(3)}
        for body in sorted(bodies):
            result = await producer.send_message_in_transaction(
                Message(TX_TOPIC, body.encode()), lambda m, a: LocalTransactionState.UNKNOW
            )
            assert result.message_queue.broker_name == "broker-a"
        await c.create_topic("b-master", TX_TOPIC)  # where the acting slave's commits go
        await until("the slave has the half messages", lambda: slave_caught_up(c))
        link.freeze()
        frozen = True
        since = len(master.log_text())
        committed_before = int((await c.runtime("a-master"))["transactionCommitted"])
        escaped_before = int((await c.runtime("a-slave"))["transactionCommitted"])

        async def committed_or_waiting() -> bool:
            if TX_WAITS in master.log_text()[since:]:
                return True
            return int((await c.runtime("a-master"))["transactionCommitted"]) >= committed_before + len(
                bodies
            )

        await until("the master committed them or waits for its slave", committed_or_waiting)
        slave_since = len(slave.log_text())
        master.kill()
        link.cut()
        await slave.wait_for_line(ACTS, SETTLE, slave_since)

        async def slave_committed() -> bool:
            await producer.instance.refresh_route(TX_TOPIC)  # the acting slave stands in for the master
            await producer.instance.heartbeat_all()
            return int((await c.runtime("a-slave"))["transactionCommitted"]) >= escaped_before + len(bodies)

        await until("the acting slave committed them", slave_committed)
        seen = await read_topic(c, TX_TOPIC, bodies)
        assert set(seen) == bodies, seen

        since = len(master.log_text())
        await c.start(master)
        await master.wait_for_line(RECLAIMED, SETTLE, since)
        seen = await read_topic(c, TX_TOPIC, bodies)
    assert set(seen) == bodies, seen
    assert not twice(seen), f"committed more than once: {twice(seen)}"
