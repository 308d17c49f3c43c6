"""The broker's JSON config files (topics.json, consumerOffset.json, ...) survive torn writes."""

import asyncio

from ferrymq.broker import persisted
from ferrymq.broker.groups import SubscriptionGroupManager
from ferrymq.broker.persisted import load_json, save_json
from ferrymq.broker.topics import TopicConfigManager
from ferrymq.protocol.bodies import (
    KVTable,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
)


def test_config_files_survive_a_torn_main_copy(tmp_path):
    path = tmp_path / "config" / "consumerOffset.json"
    save_json(path, KVTable(table={"v": "1"}))
    save_json(path, KVTable(table={"v": "2"}))
    assert load_json(path, KVTable).table == {"v": "2"}
    path.write_bytes(b'{"table": {"v": "3"')  # torn by a crash
    assert load_json(path, KVTable).table == {"v": "1"}  # the .bak copy
    assert load_json(tmp_path / "missing.json", KVTable).table == {}
    assert not list(path.parent.glob("*.tmp"))


async def test_many_group_creations_write_the_group_file_a_bounded_number_of_times(tmp_path):
    """2,000 groups made by concurrent admin-style requests (each answered once its change is
    on disk) cost a few writes of subscriptionGroup.json, not one per group."""
    groups = SubscriptionGroupManager(tmp_path, auto_create=True)
    before = persisted.writes[groups.path]

    async def create(name: str) -> None:
        groups.put(SubscriptionGroupConfig(name))
        await groups.saved()
        assert name in load_json(groups.path, SubscriptionGroupWrapper).subscription_group_table

    await asyncio.gather(*(create(f"g{i}") for i in range(2000)))
    assert persisted.writes[groups.path] - before <= 3
    for i in range(2000):  # auto-creation on look-up (a heartbeat naming many groups)
        groups.get(f"auto{i}")
    await groups.saved()
    assert persisted.writes[groups.path] - before <= 4
    assert len(load_json(groups.path, SubscriptionGroupWrapper).subscription_group_table) == 4000


async def test_many_topic_creations_in_one_loop_turn_write_the_topic_file_once(tmp_path):
    topics = TopicConfigManager(tmp_path, "b", "c", 4, auto_create=True)
    before = persisted.writes[topics.path]
    for i in range(2000):
        topics.ensure(f"t{i}", 1)
    await topics.saved()
    assert persisted.writes[topics.path] - before == 1
    assert len(load_json(topics.path, TopicConfigSerializeWrapper).topic_config_table) >= 2000


def test_changes_off_the_event_loop_are_written_at_once(tmp_path):
    groups = SubscriptionGroupManager(tmp_path, auto_create=False)
    groups.put(SubscriptionGroupConfig("g"))
    assert "g" in load_json(groups.path, SubscriptionGroupWrapper).subscription_group_table


def topic_names(path) -> set[str]:
    return set(load_json(path, TopicConfigSerializeWrapper).topic_config_table)


async def test_a_burst_of_retry_topics_over_many_loop_turns_costs_a_few_writes(tmp_path):
    """500 retry topics made one per loop turn (a closing consumer handing back a message of each
    of its queues) are written by the write in a worker thread and one more for those made while
    it ran, not by one write per turn; the file holds them all, and so after a restart."""
    topics = TopicConfigManager(tmp_path, "b", "c", 4, auto_create=True)
    before = persisted.writes[topics.path]
    names = {f"%RETRY%g{i}" for i in range(500)}
    for name in sorted(names):
        topics.ensure(name, 1)
        await asyncio.sleep(0)
    await topics.saved()
    assert persisted.writes[topics.path] - before <= 20
    assert names <= topic_names(topics.path)
    assert names <= set(TopicConfigManager(tmp_path, "b", "c", 4, auto_create=True).topics)


async def test_a_change_made_during_a_write_is_on_disk_when_saved_returns(tmp_path):
    """An admin creation while the file is being written for earlier changes waits for the next
    write, which holds it: the broker answers only once the topic is durable."""
    topics = TopicConfigManager(tmp_path, "b", "c", 4, auto_create=True)
    topics.ensure("%RETRY%early", 1)
    await asyncio.sleep(0)  # the write of "early" starts in a worker thread
    topics.put(TopicConfig("Admin", 8, 8))
    await topics.saved()
    assert {"%RETRY%early", "Admin"} <= topic_names(topics.path)


async def test_a_clean_stop_writes_the_pending_changes_at_once(tmp_path):
    topics = TopicConfigManager(tmp_path, "b", "c", 4, auto_create=True)
    topics.ensure("%RETRY%first", 1)
    await asyncio.sleep(0)  # its write is under way
    topics.ensure("%RETRY%last", 1)
    topics.file.flush_pending()  # as Broker.stop does, with no loop turn after
    assert {"%RETRY%first", "%RETRY%last"} <= topic_names(topics.path)
    await topics.saved()  # the write under way still tells its waiters
