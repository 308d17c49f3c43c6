"""A stalled slave (connected, reading nothing) holds its master's scheduled deliveries back for
`slave_acting_intent_timeout` only, with real processes: broker-a's master and its slave, replicating
through a relay the test freezes. The master delivers without the slave (while it still counts it
connected: a silent replica is dropped after `ha_housekeeping_interval`, 20 s) and says so; once the
slave has caught up, the master waits for it again."""

from __future__ import annotations

import time

import pytest
import pytest_asyncio

from tests.faults.classic import SETTLE, ClassicCluster
from tests.faults.test_acting_master_tail import relayed_group, slave_caught_up
from tests.faults.test_slave_acting_master import read_topic, schedule, twice, until

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600), pytest.mark.asyncio(loop_scope="module")]

TOPIC = "StallTopic"
LEFT_OUT = "scheduled delivery goes on without slave 1"
WAITED_AGAIN = "slave 1 caught up with the intents: waited for again"
DROPPED = "replica 1: "  # the master's line when it drops a replica silent for ha_housekeeping_interval


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory):
    c = ClassicCluster(tmp_path_factory.mktemp("stall"), "StallCluster")
    link = await relayed_group(c, {"FERRYMQ_SLAVE_ACTING_INTENT_TIMEOUT": "2000"})
    try:
        await c.start(c.namesrv)
        for name in c.brokers:
            await c.start(c.brokers[name])
        await c.create_topic("a-master", TOPIC)
        yield c, link
    finally:
        await c.stop()
        await link.close()


async def test_a_stalled_slave_delays_deliveries_for_a_bounded_time(cluster):
    c, link = cluster
    master = c.brokers["a-master"]
    await until("the slave caught up", lambda: slave_caught_up(c))
    link.freeze()
    since = len(master.log_text())
    stalled = await schedule(c, "stalled", 1, int(time.time() * 1000) + 1000, count=3, topic=TOPIC)
    seen = await read_topic(c, TOPIC, stalled)  # delivered although the slave acknowledges nothing
    assert set(seen) == stalled and not twice(seen), seen
    assert LEFT_OUT in master.log_text()[since:]
    assert DROPPED not in master.log_text()[since:], "delivered only once the master dropped the slave"

    link.cut()  # the slave connects again and copies what it missed
    await until("the slave caught up again", lambda: slave_caught_up(c))
    later = await schedule(c, "later", 1, int(time.time() * 1000) + 1000, count=3, topic=TOPIC)
    await master.wait_for_line(WAITED_AGAIN, SETTLE, since)
    seen = await read_topic(c, TOPIC, stalled | later)
    assert set(seen) == stalled | later and not twice(seen), seen
