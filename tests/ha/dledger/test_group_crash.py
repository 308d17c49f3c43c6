"""A DLedger group of three broker processes: SIGKILL the leader under load; a new one is elected,
sends succeed again, every acknowledged message is read back, and the killed broker, restarted,
catches up and holds every one of them too."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrymq.bench.dledger import SMALL_STORE, DLedgerCluster
from ferrymq.bench.failover import TOPIC, SteadyProducer, read_back
from ferrymq.store import MessageStore, StoreError
from tests.store.conftest import read_queue, small_config

pytestmark = [pytest.mark.crash, pytest.mark.timeout(120)]

FAST_ELECTIONS = {"dledger_heartbeat_ms": 100, "dledger_election_timeout_ms": 600}


def stored_keys(root) -> set[str]:
    """Every message body of the topic in the store under `root`, once the broker's indexer child,
    which exits after its parent, has let the store go."""
    sizes = {k.removeprefix("FERRYMQ_").lower(): int(v) for k, v in SMALL_STORE.items()}
    deadline = time.monotonic() + 15
    while True:
        try:
            store = MessageStore(small_config(root, **sizes)).open()
            break
        except StoreError:
            assert time.monotonic() < deadline, f"{root} stays locked"
            time.sleep(0.1)
    try:
        assert store.wait_dispatched()
        return {m.body.decode() for q in range(16) for m in read_queue(store, TOPIC, q)}
    finally:
        store.close()


async def test_sigkill_of_the_leader_elects_another_and_loses_no_acknowledged_send(tmp_path):
    async with DLedgerCluster(tmp_path, broker_settings=FAST_ELECTIONS) as cluster:
        old = await cluster.wait_master(30)
        producer = SteadyProducer(cluster.namesrv_addr, "k", concurrency=4)
        await producer.start()
        try:
            await producer.wait_acks(200, 30)
            cluster.procs[old].kill()
            killed_at = time.monotonic()
            new = await cluster.wait_master(20, other_than=old)
            await producer.wait_acks(200, 30)
        finally:
            acks = await producer.stop()
        assert acks.first_ack_after(killed_at) is not None
        found, _ = await read_back(cluster.namesrv_addr, set(acks.acked), timeout=30)
        assert not set(acks.acked) - found, f"{len(set(acks.acked) - found)} acknowledged sends lost"

        await cluster.start_broker(old)
        target = await cluster.max_offset(new)
        deadline = time.monotonic() + 30
        while await cluster.max_offset(old) < target:
            assert time.monotonic() < deadline, "the restarted broker did not catch up"
            await asyncio.sleep(0.1)
        assert await cluster.registered_master() == new  # a returning member does not depose the leader
    for name in cluster.brokers:
        missing = set(acks.acked) - stored_keys(tmp_path / name)
        assert not missing, f"{name} lacks {len(missing)} acknowledged messages: {sorted(missing)[:5]}"
