"""A slave's copy of its master's metadata: what a promoted slave needs to carry on as its master did."""

from __future__ import annotations

import json

from ferrymq.broker.transactions import CHECK_GROUP
from ferrymq.protocol.bodies import PAUSED, RATE_LIMIT, SubscriptionGroupConfig
from ferrymq.protocol.topic_names import HALF_TOPIC
from tests.ha.conftest import caught_up, eventually


async def delayed_and_timed_delivered(group, master, *, delayed: int) -> None:
    """Send a message at delay level 1 and one due in 1 s; wait until the master delivered both (the
    `delayed`-th at level 1, the first of the timer)."""
    await group.send(master, b"later", props={"DELAY": "1"})
    await group.send(master, b"timed", props={"TIMER_DELAY_MS": "1000"})
    timer = master.scheduler.timer
    await eventually(
        lambda: (
            master.scheduler.delays.offsets.get(1) == delayed
            and timer.enqueue_offset == 1
            and not timer.pending
        ),
        what="both held-back messages delivered",
    )


async def test_a_slave_copies_groups_with_their_controls_and_scheduled_progress(group):
    master = await group.start("m")
    slave = await group.start("s", broker_role="SLAVE", broker_id=1)
    master.groups.put(SubscriptionGroupConfig("Paused", retry_max_times=3, attributes={PAUSED: "true"}))
    master.groups.put(SubscriptionGroupConfig("Limited", attributes={RATE_LIMIT: "50"}))
    await delayed_and_timed_delivered(group, master, delayed=1)
    await caught_up(slave, master)

    await slave.slave_sync.sync()
    assert slave.groups.groups["Paused"] == master.groups.groups["Paused"]
    assert slave.groups.data_version == master.groups.data_version
    assert slave.consumption.gate("Paused").paused and slave.consumption.gate("Limited").bucket.rate == 50
    assert slave.scheduler.delays.offsets[1] == 1  # promoted, it would not deliver the message again
    config_dir = slave.config.store.config_dir
    await eventually(
        lambda: (
            _saved(config_dir / "delayOffset.json", "offsetTable") == {"1": 1}
            and _saved(config_dir / "timercheck", "enqueueOffset") == 1
        ),
        what="the copied progress saved",
    )
    await slave.scheduler.timer.step()  # as it would run once promoted: the timed message is done
    assert slave.scheduler.timer.pending == 0 and slave.scheduler.timer.enqueue_offset == 1

    master.groups.put(SubscriptionGroupConfig("Paused"))  # resumed on the master
    master.groups.delete("Limited")
    await slave.slave_sync.sync()
    assert slave.consumption.gate("Paused") is None and slave.consumption.gate("Limited") is None
    assert set(slave.groups.groups) == set(master.groups.groups)


async def test_a_slave_behind_its_master_does_not_take_progress_it_cannot_back(group, monkeypatch):
    """Taking the scheduler's progress without the redelivered messages would lose them if the slave
    were promoted then, and the checker's cursors could pass half messages it would then never check:
    it waits for its log to hold them, and else keeps its own progress."""
    from ferrymq.broker import slave_sync

    monkeypatch.setattr(slave_sync, "CATCH_UP_TIMEOUT", 0.3)
    master = await group.start("m")
    slave = await group.start("s", broker_role="SLAVE", broker_id=1)
    await group.send(master, b"later", props={"DELAY": "1"})
    await caught_up(slave, master)
    await slave.ha_client.stop()  # replication stops before the redelivery is written
    await eventually(
        lambda: master.scheduler.delays.offsets.get(1) == 1, what="the delayed message delivered"
    )
    master.groups.put(SubscriptionGroupConfig("G", retry_max_times=2))
    master.offsets.commit(CHECK_GROUP, HALF_TOPIC, 0, 5)  # the checker's cursor past what the slave has
    master.offsets.commit("G", "T", 0, 3)
    await slave.slave_sync.sync()
    assert slave.scheduler.delays.offsets.get(1, 0) == 0
    assert slave.offsets.query(CHECK_GROUP, HALF_TOPIC, 0) is None  # it would not check them once acting
    assert slave.groups.groups["G"].retry_max_times == 2  # the rest is copied as usual
    assert slave.offsets.query("G", "T", 0) == 3


def _saved(path, field: str):
    return json.loads(path.read_text())[field] if path.exists() else None


async def test_a_promoted_slave_counts_from_its_log_what_its_master_delivered_after_the_copy(group):
    """The master delivers after the slave last copied its progress, and dies: promoted, the slave
    finds those redeliveries in its log and does not deliver them again."""
    master = await group.start("m")
    slave = await group.start("s", broker_role="SLAVE", broker_id=1)
    await group.send(master, b"copied", props={"DELAY": "1"})
    await eventually(lambda: master.scheduler.delays.offsets.get(1) == 1, what="the first one delivered")
    await caught_up(slave, master)
    await slave.slave_sync.sync()
    await delayed_and_timed_delivered(group, master, delayed=2)
    await caught_up(slave, master)
    assert slave.scheduler.delays.offsets[1] == 1  # its copy is older than that
    await master.stop()
    log_end = slave.store.commitlog.max_offset

    await slave.change_role("master", broker_id=0, epoch=2, master_addr=None, master_ha_addr=None)
    delays, timer = slave.scheduler.delays, slave.scheduler.timer
    await eventually(
        lambda: (
            delays.offsets.get(1) == 2
            and timer.enqueue_offset == 1
            and not delays.stepping
            and not timer.stepping
        ),
        what="the promoted slave's first round",
    )
    assert timer.pending == 0
    assert slave.store.commitlog.max_offset == log_end, "delivered again"
