"""A DLedger group of real broker processes, for the fault tests and the DLedger benchmarks.

One NameServer and `members` brokers of one group (`broker-a`), each a `ferrymq` process started,
stopped, SIGKILLed and SIGSTOPped by PID, their Raft traffic on loopback ports. With `netns=True`
(root only) every broker runs in its own network namespace on a bridge (`processes.Network`), the
NameServer on the bridge's address, so that one broker can be cut off from the others and from the
clients while it keeps running. The master is whichever broker the NameServer lists with id 0: the
Raft leader registers so as soon as it is elected.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ferrymq.bench.failover import SteadyProducer
from ferrymq.bench.processes import BROKER_NAME, Network, Proc, ProcessGroup, free_port
from ferrymq.net import RemotingClient, RemotingError
from ferrymq.protocol.bodies import ClusterInfo, KVTable, decode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.message_ext import decode_records
from ferrymq.store import MessageStore, StoreConfig, StoreError

CLUSTER = "DLedgerCluster"
SMALL_STORE = {  # trials and tests must not fill the disk
    "FERRYMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(64 << 20),
    "FERRYMQ_MAPPED_FILE_SIZE_CONSUME_QUEUE": str(20_000 * 20),
    "FERRYMQ_MAX_HASH_SLOT_NUM": "10000",
    "FERRYMQ_MAX_INDEX_NUM": "100000",
}


class DLedgerCluster(ProcessGroup):
    def __init__(
        self,
        root: Path,
        *,
        members: int = 3,
        broker_settings: dict[str, object] | None = None,
        netns: bool = False,
    ) -> None:
        """`members=1` without DLedger (`dledger=False` in `broker_settings`) is a lone broker."""
        self.root = root
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.network = Network(members) if netns else None
        network = self.network
        hosts = [network.address(i) if network else "127.0.0.1" for i in range(members)]
        self.namesrv_addr = f"{network.host if network else '127.0.0.1'}:{free_port()}"
        self.procs: dict[str, Proc] = {
            "namesrv": Proc("namesrv", ["namesrv", "--listen", self.namesrv_addr], self.logs, {}, [])
        }
        settings = dict(broker_settings or {})
        dledger = settings.pop("dledger", True)
        peers = ";".join(f"n{i}-{hosts[i]}:{free_port()}" for i in range(members))
        self.broker_addrs: dict[str, str] = {}
        for i in range(members):
            name = f"broker{i}"
            self.broker_addrs[name] = f"{hosts[i]}:{free_port()}"
            env = {f"FERRYMQ_{k.upper()}": str(v) for k, v in settings.items()}
            env.update(SMALL_STORE, FERRYMQ_HA_LISTEN_PORT=str(free_port()))
            if dledger:
                env.update(FERRYMQ_ENABLE_DLEDGER_COMMIT_LOG="true", FERRYMQ_DLEDGER_PEERS=peers,
                           FERRYMQ_DLEDGER_SELF_ID=f"n{i}", FERRYMQ_DLEDGER_GROUP=BROKER_NAME)  # fmt: skip
            args = ["broker", "--namesrv", self.namesrv_addr, "--listen", self.broker_addrs[name],
                    "--cluster", CLUSTER, "--name", BROKER_NAME, "--store-dir", str(root / name)]  # fmt: skip
            prefix = network.prefix(i) if network else []
            self.procs[name] = Proc(name, args, self.logs, env, prefix)
        self._remoting: RemotingClient | None = None

    @property
    def brokers(self) -> list[str]:
        return list(self.broker_addrs)

    async def start(self) -> None:
        if self.network:
            self.network.teardown()  # a run that died may have left it behind
            self.network.setup()
        self._remoting = RemotingClient()
        self.procs["namesrv"].start()
        await self.procs["namesrv"].wait_for_line("listening", 60)
        for name in self.brokers:
            self.procs[name].start()
        for name in self.brokers:
            await self.procs[name].wait_for_line("listening on", 90)

    async def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop()
        if self._remoting is not None:
            await self._remoting.close()
        if self.network:
            self.network.teardown()

    def cut(self, name: str) -> None:
        """Take broker `name` off the network (its namespace's link goes down); it keeps running."""
        assert self.network is not None, "partitions need netns=True"
        self.network.cut(self.brokers.index(name))

    def heal(self, name: str) -> None:
        assert self.network is not None, "partitions need netns=True"
        self.network.heal(self.brokers.index(name))

    async def registered_master(self) -> str | None:
        """The process the NameServer lists as the group's master (id 0), if any."""
        try:
            reply = await self.call(self.namesrv_addr, RequestCode.GET_BROKER_CLUSTER_INFO)
        except RemotingError:
            return None
        if reply.code != ResponseCode.SUCCESS:
            return None
        data = decode_body(ClusterInfo, reply.body).broker_addr_table.get(BROKER_NAME)
        addr = data.broker_addrs.get(0) if data else None
        return next((n for n, a in self.broker_addrs.items() if a == addr), None)

    async def wait_master(self, timeout: float, other_than: str | None = None) -> str:
        """The master's process name, once the NameServer lists a running one other than `other_than`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            name = await self.registered_master()
            if name is not None and name != other_than and self.procs[name].running:
                return name
            await asyncio.sleep(0.05)
        raise TimeoutError(f"no master other than {other_than} registered in {timeout:g} s")

    async def max_offset(self, name: str) -> int:
        """The broker's CommitLog end, as its runtime info says (-1 while it does not answer)."""
        try:
            reply = await self.call(self.broker_addrs[name], RequestCode.GET_BROKER_RUNTIME_INFO)
        except RemotingError:
            return -1
        return int(decode_body(KVTable, reply.body).table.get("commitLogMaxOffset", "-1"))


async def kill_in_turn(
    cluster: DLedgerCluster, producer: SteadyProducer, rng: random.Random, rounds: int, *, acks: int = 100
) -> list[dict]:
    """`rounds` faults under load: SIGKILL the master or a follower (even odds), wait for `acks`
    more acknowledged sends, restart it, wait for half as many. One record per round."""
    master = await cluster.wait_master(30)
    done = []
    for _ in range(rounds):
        was_master = rng.random() < 0.5
        victim = master if was_master else rng.choice([n for n in cluster.brokers if n != master])
        cluster.procs[victim].kill()
        killed_at = time.monotonic()
        if was_master:
            master = await cluster.wait_master(30, other_than=victim)
        await producer.wait_acks(acks, 60)
        resumed = producer.log.first_ack_after(killed_at)
        await cluster.start_broker(victim)
        await producer.wait_acks(acks // 2, 60)
        again = round(resumed - killed_at, 3) if resumed else None
        done.append({"killed": victim, "was_master": was_master, "acked_again_s": again})
    return done


async def wait_caught_up(cluster: DLedgerCluster, timeout: float) -> None:
    """Until every broker's CommitLog reaches the master's end as it is now."""
    target = await cluster.max_offset(await cluster.wait_master(timeout))
    deadline = time.monotonic() + timeout
    for name in cluster.brokers:
        while await cluster.max_offset(name) < target:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not catch up in {timeout:g} s")
            await asyncio.sleep(0.1)


@contextmanager
def offline_store(root: Path) -> Iterator[MessageStore]:
    """The stopped broker's store under `root`, opened once the broker's indexer child, which exits
    after its parent, has let it go, and dispatched to its end."""
    sizes: dict[str, Any] = {k.removeprefix("FERRYMQ_").lower(): int(v) for k, v in SMALL_STORE.items()}
    config = StoreConfig(store_path_root_dir=root, **sizes)
    deadline = time.monotonic() + 15
    while True:
        try:
            store = MessageStore(config).open()
            break
        except StoreError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    try:
        store.wait_dispatched()
        yield store
    finally:
        store.close()


def stored_bodies(root: Path, topic: str, queues: int = 16) -> set[str]:
    """Every message body of `topic` in the stopped broker's store under `root`."""
    with offline_store(root) as store:
        found: set[str] = set()
        for q in range(queues):
            offset = 0
            while (got := store.get_messages(topic, q, offset, 1000, 1 << 30)).message_count:
                found.update(bytes(m.body).decode() for m in decode_records(b"".join(got.buffers)))
                offset = got.next_begin_offset
        return found


def queue_offsets(root: Path) -> dict[tuple[str, int], int]:
    """The next queue offset of every queue in the stopped broker's store under `root`."""
    with offline_store(root) as store:
        return {(cq.topic, cq.queue_id): cq.max_offset for cq in store.queues.all()}
