"""The op cursor never passes a commit's intent while its transaction is still ahead of the half
cursor: a slave that adopted the master's cursors (copied every 10 s) but lacks the commit's op record
must still see the intent when it starts acting, and leave the transaction to the master."""

from __future__ import annotations

import shutil
import time

from ferrymq.broker.clients import ClientRegistry
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.offsets import ConsumerOffsetManager
from ferrymq.broker.topics import TopicConfigManager
from ferrymq.broker.transactions import CHECK_GROUP, HALF_TOPIC, OP_TOPIC, TransactionService
from ferrymq.ha.dledger.command import PutCommand
from ferrymq.protocol.properties import Prop, encode_properties
from ferrymq.protocol.sys_flag import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from ferrymq.store import MessageStore, PutResult, PutStatus
from tests.store.conftest import small_config


async def test_an_acting_slave_with_the_masters_cursors_sees_a_commits_intent(tmp_path):
    store = MessageStore(small_config(tmp_path / "store")).open()

    def make_put(s):
        async def put(c: PutCommand) -> PutResult:
            return s.put_message(
                c.topic, c.queue_id, bytes(c.body), bytes(c.properties), c.flag, c.sys_flag, c.born_timestamp,
                None, c.reconsume_times, c.prepared_transaction_offset,
            )  # fmt: skip

        return put

    def service(name, s, offsets=None):
        config = BrokerConfig.from_settings(
            {"store_path_root_dir": str(tmp_path / name), "transaction_timeout": 60_000}
        )
        config.store.config_dir.mkdir(parents=True, exist_ok=True)
        topics = TopicConfigManager(config.store.config_dir, "broker-a", "C", 1, True)
        return TransactionService(
            config,
            s,
            topics,
            offsets or ConsumerOffsetManager(config.store.config_dir),
            ClientRegistry(),
            divert=lambda *a: None,
            put=make_put(s),
            written=lambda: None,
            topics_changed=lambda: None,
        )

    master = service("master", store)
    halves = []
    for body in (b"open-young", b"X", b"Y"):
        props = master.half(
            "T", 0, encode_properties({Prop.PGROUP: "G", Prop.UNIQ_KEY: body.decode()}).encode()
        )
        r = store.put_message(HALF_TOPIC, 0, body, props, born_timestamp=int(time.time() * 1000))
        halves.append((r.wrote_offset, r.queue_offset))
    cut = {}

    async def intent_then_other_end(command: PutCommand, what: str) -> bool:
        assert (await make_put(store)(command)).status is PutStatus.PUT_OK  # replicated: the slave has it
        # another END_TRANSACTION while this commit waits outside the lock (Y rolled back)
        assert await master.end("G", *halves[2], TRANSACTION_ROLLBACK_TYPE) == "rolled back"
        cut["at"] = store.commitlog.max_offset  # the slave's copy ends here (X's commit and `d` not copied)
        return True

    master.intend_by(intent_then_other_end)
    assert await master.end("G", *halves[1], TRANSACTION_COMMIT_TYPE) == "committed"
    await master.check()  # the periodic pass: commits the cursors
    op_cursor = master.offsets.query(CHECK_GROUP, OP_TOPIC, 0)
    print("op cursor", op_cursor, "half cursor", master.half_cursor, "ended", master.ended)
    store.close()

    # the slave: the master's log up to `cut`, and the master's offsets (slave_sync adopts them)
    shutil.copytree(tmp_path / "store", tmp_path / "slave-store")
    slave_store = MessageStore(small_config(tmp_path / "slave-store")).open()
    try:
        slave_store.truncate(cut["at"])
        slave = service("slave", slave_store, offsets=master.offsets)
        slave.start_acting()
        print("slave undecided", slave.undecided, "ended", slave.ended, "half cursor", slave.half_cursor)
        x = halves[1][1]
        assert x in slave.undecided or x in slave.ended, "X: committed by the master, open on the slave"
    finally:
        slave_store.close()
