"""The writes a DLedger leader makes itself go through Raft: a delayed message held back before
the leader is SIGKILLed is delivered once by the next leader, a transaction committed before is
visible there and not committed again, and once the group settles every queue has the same
offsets on every member."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.bench.dledger import DLedgerCluster, queue_offsets, stored_bodies, wait_caught_up
from ferrymq.bench.failover import read_back
from ferrymq.client import (
    ClientInstance,
    LocalTransactionState,
    Message,
    Producer,
    SendStatus,
    TransactionProducer,
)
from ferrymq.protocol.bodies import KVTable, TopicConfigSerializeWrapper, decode_body
from ferrymq.protocol.codes import RequestCode

pytestmark = [pytest.mark.crash, pytest.mark.timeout(180)]

SETTINGS = {
    "dledger_heartbeat_ms": 100,
    "dledger_election_timeout_ms": 600,
    "message_delay_level": "1s 15s",  # level 2: due after the failover below (asserted)
    "transaction_check_interval": 500,
    "transaction_timeout": 1000,  # the next leader checks every half message back at once
    "register_name_server_period": 2000,  # followers learn the master's address at a registration
    "slave_sync_interval": 1000,  # followers copy the leader's topics every second
}
DELAY_S = 15
DELAYED, COMMITTED, PLAIN = "DelayedTopic", "TxTopic", "PlainTopic"
COMMIT, ROLLBACK = LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.ROLLBACK_MESSAGE


async def topics_everywhere(cluster: DLedgerCluster, topics: set[str], timeout: float) -> None:
    """Until every member knows `topics`. Topic configs reach followers by the slaves' copy
    (slave_sync_interval), not through Raft: a topic unknown to the next leader would have no
    route after it."""
    deadline = time.monotonic() + timeout
    for addr in cluster.broker_addrs.values():
        while True:
            reply = await cluster.call(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
            if topics <= decode_body(TopicConfigSerializeWrapper, reply.body).topic_config_table.keys():
                break
            assert time.monotonic() < deadline, f"{addr} did not learn {topics} in {timeout:g} s"
            await asyncio.sleep(0.2)


async def no_half_message_pending(cluster: DLedgerCluster, name: str, timeout: float) -> None:
    """Until the master's check-back service has passed every half message (all timed out)."""
    deadline = time.monotonic() + timeout
    while True:
        reply = await cluster.call(cluster.broker_addrs[name], RequestCode.GET_BROKER_RUNTIME_INFO)
        if decode_body(KVTable, reply.body).table.get("transactionHalfPending") == "0":
            return
        assert time.monotonic() < deadline, f"half messages still pending on {name} after {timeout:g} s"
        await asyncio.sleep(0.2)


async def test_broker_writes_survive_a_leader_sigkill_once_and_offsets_agree(tmp_path):
    """The transactions' producer stays online, heartbeats the next leader within a second and
    answers every check-back "commit": a next leader that forgot which transactions ended would
    commit them (the rolled back one too) again."""
    async with DLedgerCluster(tmp_path, broker_settings=SETTINGS) as cluster:
        instance = ClientInstance(cluster.namesrv_addr, route_refresh=0.5, heartbeat_interval=0.5)
        await instance.start()
        try:
            await _fail_over(cluster, instance)
        finally:
            await instance.close()
    offsets = {name: queue_offsets(tmp_path / name) for name in cluster.brokers}
    first = offsets[cluster.brokers[0]]
    assert sum(n for (topic, _), n in first.items() if topic == DELAYED) == 1
    for name, table in offsets.items():
        differing = {q: (first.get(q), n) for q, n in table.items() if first.get(q) != n}
        differing.update({q: (n, None) for q, n in first.items() if q not in table})
        assert not differing, f"{name}'s queue offsets differ from {cluster.brokers[0]}'s: {differing}"
    for name in cluster.brokers:
        assert stored_bodies(tmp_path / name, DELAYED) == {"late"}
        assert stored_bodies(tmp_path / name, COMMITTED) == {"tx-0", "tx-2"}


async def _fail_over(cluster: DLedgerCluster, instance: ClientInstance) -> None:
    """Delayed, plain and transactional sends; SIGKILL the leader; check what the next one
    holds; restart the killed member and let it catch up."""
    old = await cluster.wait_master(30)
    async with TransactionProducer(
        "tx", cluster.namesrv_addr, checker=lambda m: COMMIT, instance=instance
    ) as tx:
        async with Producer("p", cluster.namesrv_addr) as producer:
            sent = await producer.send(Message(DELAYED, b"late", delay_level=2))
            due = time.monotonic() + DELAY_S
            assert sent.status is SendStatus.SEND_OK
            for i in range(20):
                sent = await producer.send(Message(PLAIN, f"plain-{i}".encode()))
                assert sent.status is SendStatus.SEND_OK
        for i, state in enumerate((COMMIT, ROLLBACK, COMMIT)):
            result = await tx.send_message_in_transaction(
                Message(COMMITTED, f"tx-{i}".encode()), lambda m, a, s=state: s
            )
            assert result.status is SendStatus.SEND_OK
        # END_TRANSACTION is oneway: the commits are on the leader (hence on a majority) once read
        found, _ = await read_back(cluster.namesrv_addr, {"tx-0", "tx-2"}, timeout=30, topic=COMMITTED)
        assert found == {"tx-0", "tx-2"}
        await topics_everywhere(cluster, {DELAYED, COMMITTED, PLAIN}, 30)

        assert time.monotonic() < due - 5, "too slow to fail over before the delayed message is due"
        cluster.procs[old].kill()
        new = await cluster.wait_master(20, other_than=old)
        await no_half_message_pending(cluster, new, 30)
        found, total = await read_back(cluster.namesrv_addr, {"tx-0", "tx-2"}, timeout=30, topic=COMMITTED)
        assert found == {"tx-0", "tx-2"}, "a transaction committed before the failover is not visible"
        assert total == 2, f"{total - 2} transactions committed again by the next leader"
        found, total = await read_back(cluster.namesrv_addr, {"late"}, timeout=60, topic=DELAYED)
        assert found == {"late"} and total == 1, f"the delayed message was read {total} times"

        await cluster.start_broker(old)
        await wait_caught_up(cluster, 30)
