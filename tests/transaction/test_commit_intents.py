"""Commit intents (transactions.py, schedule/intents.py) on a real store shared by a master and the
slave acting for it: the master stored its intent to commit one transaction and died before the
commit; another it committed; a third it never touched. The acting slave leaves the first to the
master, for `slave_acting_undecided_timeout` only, does not end the second again, and may end the
third at once."""

from __future__ import annotations

import time

import pytest

from ferrymq.broker.clients import ClientRegistry
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.offsets import ConsumerOffsetManager
from ferrymq.broker.topics import TopicConfigManager
from ferrymq.broker.transactions import HALF_TOPIC, EndError, TransactionService
from ferrymq.ha.dledger.command import PutCommand
from ferrymq.protocol.properties import Prop, encode_properties
from ferrymq.protocol.sys_flag import TRANSACTION_COMMIT_TYPE
from ferrymq.store import MessageStore, PutResult, PutStatus
from tests.store.conftest import small_config


async def test_the_acting_slave_leaves_a_commit_the_master_intended_to_it_for_a_while(tmp_path):
    store = MessageStore(small_config(tmp_path / "store")).open()
    try:

        async def put(c: PutCommand) -> PutResult:  # the broker's writer
            return store.put_message(
                c.topic, c.queue_id, bytes(c.body), bytes(c.properties), c.flag, c.sys_flag, c.born_timestamp,
                None, c.reconsume_times, c.prepared_transaction_offset,
            )  # fmt: skip

        def service(name: str, undecided_timeout_ms: int) -> TransactionService:
            config = BrokerConfig.from_settings(
                {
                    "store_path_root_dir": str(tmp_path / name),
                    "slave_acting_undecided_timeout": undecided_timeout_ms,
                }
            )
            config.store.config_dir.mkdir(parents=True, exist_ok=True)
            topics = TopicConfigManager(config.store.config_dir, "broker-a", "C", 1, True)
            return TransactionService(
                config, store, topics, ConsumerOffsetManager(config.store.config_dir), ClientRegistry(),
                divert=lambda *a: None, put=put, written=lambda: None, topics_changed=lambda: None,
            )  # fmt: skip

        master = service("master", 0)
        halves = []
        for body in (b"intended", b"committed", b"untouched"):
            props = master.half(
                "T", 0, encode_properties({Prop.PGROUP: "G", Prop.UNIQ_KEY: body.decode()}).encode()
            )
            result = store.put_message(HALF_TOPIC, 0, body, props, born_timestamp=int(time.time() * 1000))
            assert result.ok
            halves.append((result.wrote_offset, result.queue_offset))
        intents: list[str] = []

        async def dies_after_the_intent(command: PutCommand, what: str) -> bool:
            intents.append(what)
            await put(command)  # replicated, then the master died: no commit
            return False

        async def intent_replicated(command: PutCommand, what: str) -> bool:
            intents.append(what)
            return (await put(command)).status is PutStatus.PUT_OK

        master.intend_by(dies_after_the_intent)
        with pytest.raises(EndError):
            await master.end("G", *halves[0], TRANSACTION_COMMIT_TYPE)
        master.intend_by(intent_replicated)
        assert await master.end("G", *halves[1], TRANSACTION_COMMIT_TYPE) == "committed"
        assert intents == ["transaction commit", "transaction commit"]
        assert store.wait_dispatched() and store.get_max_offset("T", 0) == 1

        escaped: list[bytes] = []

        async def bridge(topic, queue_id, body, *rest) -> PutResult:  # to another group's master
            escaped.append(bytes(body))
            return PutResult(PutStatus.PUT_OK)

        slave = service("slave", 60_000)
        slave.start_acting()
        assert slave.undecided == {halves[0][1]}
        with pytest.raises(EndError, match="left to the master"):
            await slave.end_escaped(bridge, "G", *halves[0], TRANSACTION_COMMIT_TYPE)
        assert await slave.end_escaped(bridge, "G", *halves[1], TRANSACTION_COMMIT_TYPE) == "already ended"
        assert await slave.end_escaped(bridge, "G", *halves[2], TRANSACTION_COMMIT_TYPE) == "committed"
        assert escaped == [b"untouched"]

        slave.undecided_timeout = 0  # the master stays away: the slave ends it (at least once)
        slave.start_acting()
        assert await slave.end_escaped(bridge, "G", *halves[0], TRANSACTION_COMMIT_TYPE) == "committed"
        assert escaped == [b"untouched", b"intended"]
    finally:
        store.close()
