"""Transactional messages end to end: SDK TransactionProducer, broker half/op topics, check-back."""

from __future__ import annotations

import asyncio
import time

from ferrymq.client import LocalTransactionState, Message, TransactionProducer
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.message_id import parse_offset_msg_id
from ferrymq.protocol.topic_names import CHECK_MAX_TIME_TOPIC, HALF_TOPIC

from .conftest import make_cluster, read_all, wait_for  # noqa: F401  (fixture)

COMMIT, ROLLBACK, UNKNOW = (
    LocalTransactionState.COMMIT_MESSAGE,
    LocalTransactionState.ROLLBACK_MESSAGE,
    LocalTransactionState.UNKNOW,
)


async def test_commit_is_visible_rollback_is_not(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    async with TransactionProducer("TXG", cluster.namesrv_addr) as producer:
        seen_in_callback = []

        async def commit(msg, arg):
            # While the local transaction runs, the message is stored but nobody can consume it.
            await cluster.settled()
            seen_in_callback.append(cluster.broker.store.get_max_offset("Tx", arg))
            return COMMIT

        committed = await producer.send_message_in_transaction(Message("Tx", b"yes", keys="k1"), commit, 0)
        rolled = await producer.send_message_in_transaction(Message("Tx", b"no"), lambda m, a: ROLLBACK)
        failed = await producer.send_message_in_transaction(Message("Tx", b"boom"), _raises)
    assert committed.local_transaction_state is COMMIT and rolled.local_transaction_state is ROLLBACK
    assert failed.local_transaction_state is UNKNOW
    assert seen_in_callback == [0]
    got = await read_all(cluster.namesrv_addr, "Tx", "C1", expect=1)
    assert [m.body for m in got] == [b"yes"]
    assert got[0].msg_id == committed.msg_id and got[0].keys == ["k1"]
    assert "TRAN_MSG" not in got[0].properties and got[0].properties["PGROUP"] == "TXG"
    assert got[0].sys_flag & 0xC == 0x8  # TRANSACTION_COMMIT_TYPE
    info = cluster.broker.runtime_info()
    assert (info["transactionCommitted"], info["transactionRolledBack"]) == ("1", "1")


def _raises(msg, arg):
    raise RuntimeError("database down")


async def test_end_transaction_twice_commits_once_and_bad_ends_are_refused(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    async with TransactionProducer("TXG", cluster.namesrv_addr) as producer:
        result = await producer.send_message_in_transaction(Message("Tx2", b"once"), lambda m, a: COMMIT)
    _, _, phys = parse_offset_msg_id(result.offset_msg_id)
    ext = {"producerGroup": "TXG", "tranStateTableOffset": result.queue_offset, "commitLogOffset": phys,
           "commitOrRollback": 8, "msgId": result.msg_id}  # fmt: skip
    again = await cluster.call(RequestCode.END_TRANSACTION, ext)
    assert (again.code, again.remark) == (ResponseCode.SUCCESS, "already ended")
    wrong_group = await cluster.call(RequestCode.END_TRANSACTION, {**ext, "producerGroup": "other"})
    assert wrong_group.code == ResponseCode.SYSTEM_ERROR and "producer group" in wrong_group.remark
    nowhere = await cluster.call(RequestCode.END_TRANSACTION, {**ext, "commitLogOffset": 10**12})
    assert nowhere.code == ResponseCode.SYSTEM_ERROR and "no half message" in nowhere.remark
    bad_state = await cluster.call(RequestCode.END_TRANSACTION, {**ext, "commitOrRollback": 5})
    assert bad_state.code == ResponseCode.SYSTEM_ERROR
    got = await read_all(cluster.namesrv_addr, "Tx2", "C1", expect=1)
    assert [m.body for m in got] == [b"once"]


async def test_check_back_commits_rolls_back_and_discards(make_cluster, fast_checks):  # noqa: F811
    cluster = await make_cluster(**fast_checks)
    answers = {"later-commit": COMMIT, "later-rollback": ROLLBACK, "never": UNKNOW}
    checked: list[str] = []

    def checker(msg):  # a plain function: runs in a worker thread
        checked.append(msg.body.decode())
        assert msg.topic == "Tx3"
        return answers[msg.body.decode()]

    async with TransactionProducer("TXG", cluster.namesrv_addr, checker=checker) as producer:
        for body in answers:
            result = await producer.send_message_in_transaction(
                Message("Tx3", body.encode()), lambda m, a: UNKNOW
            )
            assert result.local_transaction_state is UNKNOW
        broker = cluster.broker
        await wait_for(lambda: broker.store.get_max_offset(CHECK_MAX_TIME_TOPIC, 0) == 1, what="discard")
    assert checked.count("never") == 3  # transaction_check_max
    assert checked.count("later-commit") == 1 and checked.count("later-rollback") == 1
    assert broker.runtime_info()["transactionDiscarded"] == "1"
    await wait_for(lambda: broker.runtime_info()["transactionHalfPending"] == "0", what="nothing pending")
    got = await read_all(cluster.namesrv_addr, "Tx3", "C1", expect=1)
    assert [m.body for m in got] == [b"later-commit"]
    assert broker.store.get_max_offset(HALF_TOPIC, 0) > 3  # the checked copies


async def test_a_compressed_half_is_checked_with_its_content(make_cluster, fast_checks):  # noqa: F811
    cluster = await make_cluster(**fast_checks)
    body = b"order 42 awaits payment; " * 400  # over 4 KiB: sent zstd-compressed
    checked: list[bytes] = []

    def checker(msg):
        checked.append(msg.body)
        return COMMIT

    async with TransactionProducer("TXZ", cluster.namesrv_addr, checker=checker, compression="zstd") as tx:
        await tx.send_message_in_transaction(Message("TxZ", body), lambda m, a: UNKNOW)
        got = await read_all(cluster.namesrv_addr, "TxZ", "C1", expect=1)
    assert checked == [body]
    assert [(m.body, m.sys_flag & 0x301) for m in got] == [(body, 0x200)]  # decompressed; stored as zstd


async def test_check_back_waits_for_a_producer_of_the_group(make_cluster, fast_checks):  # noqa: F811
    cluster = await make_cluster(**{**fast_checks, "transaction_check_max": 1000})
    async with TransactionProducer("TXG", cluster.namesrv_addr) as producer:  # no checker
        await producer.send_message_in_transaction(Message("Tx4", b"orphan"), lambda m, a: UNKNOW)
    await asyncio.sleep(0)
    async with TransactionProducer("TXG", cluster.namesrv_addr, checker=lambda m: COMMIT) as producer:
        await producer.instance.route("Tx4")
        await producer.instance.heartbeat_all()
        got = await read_all(cluster.namesrv_addr, "Tx4", "C1", expect=1)
    assert [m.body for m in got] == [b"orphan"]


async def test_sync_facade(make_cluster):  # noqa: F811
    cluster = await make_cluster()

    def run() -> list:
        from ferrymq.client import sync

        with sync.TransactionProducer("TXS", cluster.namesrv_addr, checker=lambda m: COMMIT) as producer:
            return [
                producer.send_message_in_transaction(sync.Message("TxSync", b"s"), lambda m, a: a, state)
                for state in (COMMIT, ROLLBACK)
            ]

    results = await asyncio.to_thread(run)
    assert [r.local_transaction_state for r in results] == [COMMIT, ROLLBACK]
    got = await read_all(cluster.namesrv_addr, "TxSync", "C1", expect=1)
    assert [m.body for m in got] == [b"s"]


async def test_a_committed_message_with_a_delay_is_held_back_until_due(make_cluster):  # noqa: F811
    cluster = await make_cluster(message_delay_level="2s", timer_max_delay_sec=60)
    async with TransactionProducer("TXD", cluster.namesrv_addr) as producer:
        far = Message("TxLate", b"far", deliver_time_ms=int(time.time() * 1000) + 3_600_000)
        refused = await _refusal(producer.send_message_in_transaction(far, lambda m, a: COMMIT))
        assert "timer_max_delay_sec" in refused or "too far" in refused
        committed_at = time.time()
        late = Message("TxLate", b"late", delay_ms=2000)
        assert (
            await producer.send_message_in_transaction(late, lambda m, a: COMMIT)
        ).local_transaction_state is COMMIT
    await cluster.settled()
    queues = range(cluster.broker.topics.get("TxLate").read_queue_nums)
    assert sum(cluster.broker.store.get_max_offset("TxLate", q) for q in queues) == 0  # committed, not due
    got = await read_all(cluster.namesrv_addr, "TxLate", "C1", expect=1)
    assert [m.body for m in got] == [b"late"]
    assert time.time() - committed_at >= 2


async def _refusal(awaitable) -> str:
    try:
        await awaitable
    except Exception as e:
        return str(e)
    raise AssertionError("the send was accepted")


async def test_concurrent_ends_each_leave_one_op_record(make_cluster, fast_checks):  # noqa: F811
    from ferrymq.broker.transactions import _op_origins
    from ferrymq.protocol.topic_names import OP_TOPIC

    cluster = await make_cluster(**{**fast_checks, "transaction_check_max": 1000})
    checked: list[bytes] = []
    async with TransactionProducer(
        "TXG", cluster.namesrv_addr, checker=lambda m: checked.append(m.body)
    ) as p:
        results = await asyncio.gather(*(
            p.send_message_in_transaction(Message("Tx6", b"%d" % i), lambda m, a: COMMIT) for i in range(40)
        ))  # fmt: skip
        broker = cluster.broker
        await wait_for(lambda: broker.runtime_info()["transactionCommitted"] == "40", what="40 commits")
        await wait_for(lambda: broker.runtime_info()["transactionHalfPending"] == "0", what="checker passed")
    assert {r.local_transaction_state for r in results} == {COMMIT} and checked == []
    ops = broker.store.get_max_offset(OP_TOPIC, 0)
    assert ops == 40  # written with its commit: a SIGKILL cannot leave a commit without it
    origins = [o for m in broker.transactions._read(OP_TOPIC, 0, ops) for o in _op_origins(m.body)]
    assert sorted(origins) == list(range(40))  # what a restart reads back: every transaction ended, once
    got = await read_all(cluster.namesrv_addr, "Tx6", "C1", expect=40)
    assert sorted(int(m.body) for m in got) == list(range(40))
