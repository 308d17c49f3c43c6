"""SIGKILL the broker in the middle of transactions: committed stays committed (once), rolled back
stays invisible, and half messages left unknown are still checked back after the restart."""

from __future__ import annotations

import asyncio
import signal

import pytest

from ferrymq.bench.processes import free_port
from ferrymq.client import LocalTransactionState, Message, TransactionProducer
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer
from tests.compat.conftest import ServerProcess

from .conftest import read_all, wait_for

pytestmark = pytest.mark.crash

COMMIT, ROLLBACK, UNKNOW = (
    LocalTransactionState.COMMIT_MESSAGE,
    LocalTransactionState.ROLLBACK_MESSAGE,
    LocalTransactionState.UNKNOW,
)
OUTCOME = {"commit": COMMIT, "rollback": ROLLBACK, "unknown": UNKNOW}


BROKER_TOML = """
transaction_check_interval = 300
transaction_timeout = 500
transaction_check_max = 1000
mapped_file_size_commit_log = 16777216
mapped_file_size_consume_queue = 20000
max_hash_slot_num = 1024
max_index_num = 10000
"""


def start_broker(tmp_path, namesrv_port: int, port: int) -> ServerProcess:
    """A broker process with short check-back settings and small files (the disk is shared)."""
    config = tmp_path / "broker.toml"
    config.write_text(BROKER_TOML)
    broker = ServerProcess(
        "broker",
        ["-c", str(config), "--namesrv", f"127.0.0.1:{namesrv_port}", "--listen", f"127.0.0.1:{port}",
         "--store-dir", str(tmp_path / "store")],
        tmp_path,
    )  # fmt: skip
    broker.wait_listening(f"127.0.0.1:{port}")
    return broker


async def test_sigkill_keeps_outcomes_and_pending_checks(tmp_path):
    namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
    await namesrv.start()
    namesrv_addr = f"127.0.0.1:{namesrv.port}"
    port = free_port()
    broker = start_broker(tmp_path, namesrv.port, port)
    try:
        async with TransactionProducer("TXG", namesrv_addr) as producer:  # no checker: nothing resolves
            await wait_for(lambda: _routable(producer), what="the broker's route")
            for i in range(30):
                kind = ("commit", "rollback", "unknown")[i % 3]
                await producer.send_message_in_transaction(
                    Message("TxCrash", f"{kind}-{i}".encode()),
                    lambda m, a: OUTCOME[m.body.decode().split("-")[0]],
                )
            committed = await read_all(namesrv_addr, "TxCrash", "C1", expect=10)
            assert sorted(m.body for m in committed) == sorted(
                f"commit-{i}".encode() for i in range(0, 30, 3)
            )
        broker.proc.send_signal(signal.SIGKILL)
        broker.proc.wait(10)
        broker = start_broker(tmp_path, namesrv.port, port)

        def checker(msg):
            return COMMIT  # says commit to anything it is asked about: rolled back ones must never be asked

        async with TransactionProducer("TXG", namesrv_addr, checker=checker) as producer:
            await wait_for(lambda: _routable(producer), what="the restarted broker's route")
            await producer.instance.route("TxCrash")
            await producer.instance.heartbeat_all()
            got = await read_all(namesrv_addr, "TxCrash", "C2", expect=20, timeout=30)
        bodies = sorted(m.body.decode() for m in got)
        kinds = [("commit", "rollback", "unknown")[i % 3] for i in range(30)]
        expected = sorted(f"{k}-{i}" for i, k in enumerate(kinds) if k != "rollback")
        assert bodies == expected  # each exactly once
    finally:
        broker.stop()
        await namesrv.stop()


async def _routable(producer: TransactionProducer) -> bool:
    try:
        route = await producer.instance.refresh_route("TBW102")
    except Exception:
        return False
    return bool(route.write_queues)


async def test_sigkill_in_the_middle_of_concurrent_transactions(tmp_path):
    """The local transactions decide; the broker dies while sends and ENDs are in flight. After the
    restart the check-back asks the same 'database', and consumers see exactly the committed ones."""
    namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
    await namesrv.start()
    namesrv_addr = f"127.0.0.1:{namesrv.port}"
    port = free_port()
    broker = start_broker(tmp_path, namesrv.port, port)
    decided: dict[str, LocalTransactionState] = {}  # the application's own record of its transactions

    def local_transaction(msg, arg):
        decided[msg.body.decode()] = COMMIT if arg % 2 == 0 else ROLLBACK
        return decided[msg.body.decode()]

    def checker(msg):  # a transaction the application never ran was never committed
        return decided.get(msg.body.decode(), ROLLBACK)

    try:
        async with TransactionProducer("TXK", namesrv_addr, checker=checker, send_timeout=2.0) as producer:
            await wait_for(lambda: _routable(producer), what="the broker's route")
            counter = iter(range(10_000))

            async def sender() -> None:
                for i in counter:
                    try:
                        await producer.send_message_in_transaction(
                            Message("TxKill", f"tx-{i}".encode()), local_transaction, i
                        )
                    except Exception:
                        return  # the broker is gone

            senders = [asyncio.get_running_loop().create_task(sender()) for _ in range(8)]
            await wait_for(lambda: len(decided) >= 60, what="some transactions")
            broker.proc.send_signal(signal.SIGKILL)
            await asyncio.gather(*senders)
            broker.proc.wait(10)
            broker = start_broker(tmp_path, namesrv.port, port)
            await wait_for(lambda: _routable(producer), what="the restarted broker's route")
            await producer.instance.heartbeat_all()  # so the restarted broker can check back at once
            committed = {body for body, state in decided.items() if state is COMMIT}
            got = await read_all(namesrv_addr, "TxKill", "C1", expect=len(committed), timeout=40)
        bodies = [m.body.decode() for m in got]
        assert sorted(bodies) == sorted(committed)  # none lost, none doubled, no rolled-back one
    finally:
        broker.stop()
        await namesrv.stop()
