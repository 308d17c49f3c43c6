"""A deterministic Raft cluster: seeded network, fake clocks, crashes that keep only persisted state.

One `random.Random(seed)` decides everything (delays, drops, duplicates, partitions, crashes, client
traffic, each node's election timeouts), so a failing seed replays exactly. The nodes are the real
`RaftNode`; this module is only their driver and their world:

- the network delays messages, keeps each link in order except for a seeded share that overtakes
  (reorders), drops, duplicates, and cuts links one way or both (partitions, isolated nodes);
- each node's clock ticks at its own rate;
- a crash throws the node away and restarts it from its durable term, vote and log; a crash may
  also strike between a Ready's log writes and its fsync, keeping either side of it (or, with the
  logs in real files, a torn write that the file log's recovery has to cut off);
- clients propose unique bodies to whoever claims to lead, and that node's `PendingAppends`
  acknowledges an append when its commit index covers it with the term it was given;
- operators ask the leader to hand over, and some seeds name a preferred leader.

Checked all along: one leader per term (election safety), a new leader holds every committed entry
(leader completeness, which covers every acknowledged append), no two nodes apply different
entries at an index (state machine safety), logs that agree at an index agree before it (log
matching). After the faults stop and the network heals, a leader must emerge, every node must reach
its commit index, and every acknowledged append must be in its log.
"""

from __future__ import annotations

import heapq
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ferrymq.ha.dledger import wire
from ferrymq.ha.dledger.commitlog_log import CommitLogRaftLog
from ferrymq.ha.dledger.filelog import FileLog
from ferrymq.ha.dledger.log import Entry, MemoryLog
from ferrymq.ha.dledger.pending import PendingAppends
from ferrymq.ha.dledger.raft import HardState, NotLeader, RaftConfig, RaftNode, RaftSafetyError, Role
from ferrymq.store.commitlog import CommitLog

TICK, DELIVER, CLIENT, FAULT, HEAL_LINKS, RESTART, TRANSFER = range(7)
SETTLE_MS = 5000  # after the schedule ends, how long the calm cluster gets to converge


@dataclass
class Faults:
    """One seed's weather."""

    drop: float
    duplicate: float
    reorder: float  # chance a message overtakes those sent before it on its link (FIFO otherwise)
    delay_ms: tuple[int, int]
    fault_every_ms: int  # mean gap between crashes / partitions
    crash_before_sync: float  # chance a crash strikes between a Ready's writes and its fsync

    @classmethod
    def draw(cls, rng: random.Random) -> Faults:
        slow = rng.random() < 0.15
        return cls(
            drop=rng.choice((0.0, 0.01, 0.05, 0.2)),
            duplicate=rng.choice((0.0, 0.02, 0.1)),
            reorder=rng.choice((0.0, 0.05, 0.3)),
            delay_ms=(rng.randint(0, 5), rng.randint(300, 600) if slow else rng.randint(5, 60)),
            fault_every_ms=rng.choice((700, 1500, 3000)),
            crash_before_sync=rng.choice((0.0, 0.3)),
        )


class MemoryDisk:
    """A node's log on a pretend disk: what the last sync saw survives a crash."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    def open(self) -> MemoryLog:
        return MemoryLog(self.entries)

    def synced(self, log) -> None:
        self.entries = list(log.entries)

    def crashed(self, log, torn: bool, rng: random.Random) -> None:
        """Crash before the sync of writes already made: the disk keeps either side of them."""
        if torn and rng.random() < 0.5:
            self.synced(log)


class FileDisk:
    """A node's log in real files (`FileLog`, in small segments), reopened (and recovered) after
    every crash.

    A process crash keeps every write (the page cache survives it); a crash before a sync cuts
    each file somewhere between its size at the last sync and its size now, a torn write.
    """

    SEGMENT_BYTES = 4096  # several segments per run, so rolling and recovery across them are tested

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sizes: dict[Path, int] = {}

    def open(self) -> FileLog:
        return FileLog(self.root, self.SEGMENT_BYTES)

    def _now(self) -> dict[Path, int]:
        return {p: p.stat().st_size for p in self.root.iterdir() if p.suffix in (".data", ".index")}

    def synced(self, log) -> None:
        self.sizes = self._now()

    def crashed(self, log, torn: bool, rng: random.Random) -> None:
        log.close()
        if torn:
            for path, now in sorted(self._now().items()):
                os.truncate(path, rng.randint(min(self.sizes.get(path, 0), now), now))


class CommitLogDisk:
    """A node's log as DLedger's single log: entries in CommitLog segments of 4 KiB, index units in
    their own files (`CommitLogRaftLog`), reopened and recovered after every crash.

    A crash before a sync cuts each index file as `FileDisk` cuts its files, and tears the
    CommitLog: its bytes from somewhere between the end at the last sync and the end now are lost
    (zeros), the first few of them sometimes garbage.
    """

    SEGMENT_BYTES = 4096

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sizes: dict[Path, int] = {}
        self.synced_end = 0
        self.commitlog: CommitLog | None = None

    def open(self) -> CommitLogRaftLog:
        self.commitlog = CommitLog(self.root / "commitlog", self.SEGMENT_BYTES)
        return CommitLogRaftLog(self.root / "dledger", self.commitlog)

    def _now(self) -> dict[Path, int]:
        return {p: p.stat().st_size for p in (self.root / "dledger").glob("*.index")}

    def synced(self, log) -> None:
        self.sizes = self._now()
        self.synced_end = log.commitlog.max_offset

    def crashed(self, log, torn: bool, rng: random.Random) -> None:
        end = log.commitlog.max_offset
        log.close()
        assert self.commitlog is not None
        self.commitlog.close()
        if not torn:
            return
        for path, now in sorted(self._now().items()):
            os.truncate(path, rng.randint(min(self.sizes.get(path, 0), now), now))
        cut = rng.randint(min(self.synced_end, end), end)
        size = self.SEGMENT_BYTES
        while cut < end:  # the lost bytes, segment by segment
            base = cut // size * size
            stop = min(end, base + size)
            path = self.root / "commitlog" / f"{base:020d}"
            if path.exists():
                lost = bytearray(stop - cut)
                if rng.random() < 0.5:
                    noise = rng.randbytes(min(len(lost), 16))
                    lost[: len(noise)] = noise
                with open(path, "r+b") as f:
                    f.seek(cut - base)
                    f.write(lost)
            cut = stop


def _disk(root: Path, single_log: bool) -> FileDisk | CommitLogDisk:
    return CommitLogDisk(root) if single_log else FileDisk(root)


def entries_of(log) -> Sequence[Entry]:
    if isinstance(log, MemoryLog):
        return log.entries
    out: list[Entry] = []
    while len(out) <= log.last_index:  # a FileLog reads one segment at a time
        out += log.read(len(out), 1 << 30, 1 << 62)
    return out


@dataclass
class SimNode:
    id: str
    tick_ms: int
    disk: MemoryDisk | FileDisk | CommitLogDisk
    hard: HardState = field(default_factory=HardState)
    raft: RaftNode | None = None
    applied: int = -1
    pending: PendingAppends[tuple[int, bytes]] = field(default_factory=PendingAppends)  # (index, body)
    crash_at_next_sync: bool = False

    @property
    def entries(self) -> Sequence[Entry]:
        assert self.raft is not None
        return entries_of(self.raft.log)


class Violation(AssertionError):
    pass


class Cluster:
    def __init__(
        self,
        seed: int,
        size: int | None = None,
        faults: Faults | None = None,
        fault_ms: int = 12_000,
        heal_ms: int = 8_000,
        config: RaftConfig | None = None,
        node_factory: type[RaftNode] = RaftNode,
        files: Path | None = None,
        wire: bool = False,
        single_log: bool = False,
    ) -> None:
        """`files`: keep the logs in FileLogs under this directory instead of in memory (with
        `single_log`, in CommitLog segments: `CommitLogRaftLog`).
        `wire`: send every message as a frame (`wire.encode`) and deliver what `wire.decode` makes of it.
        """
        self.wire = wire
        self.rng = random.Random(seed)
        self.seed = seed
        rng = self.rng
        self.size = size or rng.choice((3, 5))
        self.faults = faults or Faults.draw(rng)
        self.fault_ms = fault_ms
        self.end_ms = fault_ms + heal_ms
        preferred = rng.choice((None, None, "n1"))
        per_append = rng.choice((1, 4, 64))
        self.config = config or RaftConfig(
            election_ticks=rng.choice((6, 10)),
            heartbeat_ticks=rng.choice((1, 2, 3)),
            max_append_entries=per_append,
            max_inflight=8 if per_append == 1 else rng.choice((1, 2, 8)),  # keeps up with the clients
            eager_inflight=None if per_append == 1 else rng.choice((None, 1, 2)),
            pre_vote=rng.random() < 0.8,
            check_quorum=rng.random() < 0.8,
            preferred_leader=preferred,
        )
        self.node_factory = node_factory
        self.ids = [f"n{i}" for i in range(self.size)]
        self.nodes = {
            i: SimNode(i, rng.randint(90, 110), _disk(files / i, single_log) if files else MemoryDisk())
            for i in self.ids
        }
        self.cut: set[tuple[str, str]] = set()  # (src, dst) links that lose everything
        self._link_last: dict[tuple[str, str], int] = {}  # latest delivery time scheduled per link
        self.now = 0
        self._events: list[tuple[int, int, int, object]] = []
        self._seq = 0
        self.leaders: dict[int, str] = {}  # term -> leader
        self.committed: dict[int, Entry] = {}  # index -> the entry some node applied there
        self.acked: dict[int, bytes] = {}  # index -> body of an acknowledged append
        self.proposed = 0
        self.stats = {"elections": 0, "crashes": 0, "torn": 0, "partitions": 0, "transfers": 0, "messages": 0}
        self._next_body = 0
        for node in self.nodes.values():
            self._start(node)
            self._at(rng.randint(0, node.tick_ms), TICK, node.id)
        self._at(rng.randint(50, 300), CLIENT, None)
        self._at(rng.randint(0, self.faults.fault_every_ms * 2), FAULT, None)
        self._at(rng.randint(2000, 6000), TRANSFER, None)

    def close(self) -> None:
        """Every node stopped, its log's files closed (a stop keeps every write)."""
        for node in self.nodes.values():
            if node.raft is not None:
                node.disk.crashed(node.raft.log, False, self.rng)
                node.raft = None

    # -- the world --------------------------------------------------------------------------------

    def _at(self, when: int, kind: int, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, kind, payload))

    def _start(self, node: SimNode) -> None:
        node.raft = self.node_factory(
            node.id,
            self.ids,
            node.disk.open(),
            node.hard,
            random.Random(self.rng.random()),
            self.config,
        )
        node.applied = -1

    def crash(self, node: SimNode, down_ms: int, torn: bool = False) -> None:
        assert node.raft is not None
        node.disk.crashed(node.raft.log, torn, self.rng)
        self.stats["torn"] += torn
        node.raft = None
        node.pending.drop_all()
        node.crash_at_next_sync = False
        self.stats["crashes"] += 1
        self._at(self.now + down_ms, RESTART, node.id)

    def _send(self, m) -> None:
        if self.wire:
            m = wire.decode(b"".join(wire.encode(m)))
        f = self.faults
        if (m.src, m.dst) in self.cut or self.rng.random() < f.drop:
            return
        copies = 2 if self.rng.random() < f.duplicate else 1
        link = (m.src, m.dst)
        for _ in range(copies):
            when = self.now + self.rng.randint(*f.delay_ms)
            if self.rng.random() >= f.reorder:
                when = max(when, self._link_last.get(link, 0))
            self._link_last[link] = max(when, self._link_last.get(link, 0))
            self._at(when, DELIVER, m)

    def run(self) -> Cluster:
        """Run the whole schedule; raises Violation on the first broken property."""
        end, settle = self.end_ms, self.end_ms + SETTLE_MS
        self.run_until(lambda when: when > end and (self._converged() or when > settle))
        self._check_end()
        return self

    def run_until(self, stop: Callable[[int], bool]) -> None:
        """Handle events in time order until `stop(time of the next event)` is true."""
        try:
            while self._events and not stop(self._events[0][0]):
                when, _, kind, payload = heapq.heappop(self._events)
                self.now = when
                self._handle(kind, payload)
        except RaftSafetyError as e:
            raise Violation(f"seed {self.seed}: node refused an unsafe step: {e}") from e

    def _handle(self, kind: int, payload: object) -> None:
        if kind == DELIVER:
            self.stats["messages"] += 1
            node = self.nodes[payload.dst]
            if node.raft is not None and (payload.src, payload.dst) not in self.cut:
                node.raft.step(payload)
                self._process(node)
        elif kind == TICK:
            node = self.nodes[payload]
            if node.raft is not None:
                node.raft.tick()
                self._process(node)
            self._at(self.now + node.tick_ms, TICK, node.id)
        elif kind == CLIENT:
            self._client()
            self._at(self.now + self.rng.randint(20, 250), CLIENT, None)
        elif kind == FAULT:
            if self.now < self.fault_ms:
                self._fault()
                self._at(self.now + self.rng.randint(1, 2 * self.faults.fault_every_ms), FAULT, None)
            else:
                self._heal()
        elif kind == HEAL_LINKS:
            for link in payload:
                self.cut.discard(link)
        elif kind == RESTART:
            node = self.nodes[payload]
            if node.raft is None:
                self._start(node)
        elif kind == TRANSFER:
            leader = self.leader()
            if leader is not None and self.now < self.fault_ms:
                assert leader.raft is not None
                leader.raft.transfer_leadership(self.rng.choice(leader.raft.others))
                self._process(leader)
                self.stats["transfers"] += 1
            self._at(self.now + self.rng.randint(2000, 6000), TRANSFER, None)

    def _fault(self) -> None:
        rng = self.rng
        choice = rng.random()
        if choice < 0.45:
            up = [n for n in self.nodes.values() if n.raft is not None]
            leader = self.leader()
            if up:
                node = leader if leader is not None and rng.random() < 0.5 else rng.choice(up)
                if rng.random() < self.faults.crash_before_sync:
                    node.crash_at_next_sync = True
                else:
                    self.crash(node, rng.randint(100, 4000))
            return
        self.stats["partitions"] += 1
        if choice < 0.75:  # two sides
            side = set(rng.sample(self.ids, rng.randint(1, self.size // 2)))
            links = {(a, b) for a in self.ids for b in self.ids if a != b and (a in side) != (b in side)}
        else:  # some links, one way
            links = {tuple(rng.sample(self.ids, 2)) for _ in range(rng.randint(1, self.size))}
        self.cut |= links
        self._at(self.now + rng.randint(300, 5000), HEAL_LINKS, links)

    def _heal(self) -> None:
        """Faults are over: links mend, every node comes back, messages still get lost sometimes."""
        self.cut.clear()
        for node in self.nodes.values():
            if node.raft is None:
                self._start(node)
            node.crash_at_next_sync = False
        self.faults.drop = min(self.faults.drop, 0.01)
        self.faults.reorder = 0.0
        self.faults.delay_ms = (self.faults.delay_ms[0], min(self.faults.delay_ms[1], 60))

    # -- driving one node -------------------------------------------------------------------------

    def _process(self, node: SimNode) -> None:
        raft = node.raft
        assert raft is not None
        if not raft.has_ready():
            return
        rd = raft.ready()
        if node.crash_at_next_sync and (rd.hard_state is not None or rd.unsynced_from is not None):
            # the writes happened, the fsync did not: the disk keeps either side of them
            if rd.hard_state is not None and self.rng.random() < 0.5:
                node.hard = rd.hard_state
            self.crash(node, self.rng.randint(100, 3000), torn=rd.unsynced_from is not None)
            return
        if rd.hard_state is not None:
            node.hard = rd.hard_state
        if rd.unsynced_from is not None:
            node.disk.synced(raft.log)
        for m in rd.messages:
            self._send(m)
        if rd.soft_state is not None and rd.soft_state.role is Role.LEADER:
            self._elected(node, rd.soft_state.term)
        if rd.commit is not None:
            self._apply(node, rd.commit)

    def _elected(self, node: SimNode, term: int) -> None:
        self.stats["elections"] += 1
        other = self.leaders.setdefault(term, node.id)
        if other != node.id:
            raise Violation(f"seed {self.seed}: two leaders in term {term}: {other} and {node.id}")
        entries = node.entries
        for index, entry in self.committed.items():
            if index >= len(entries) or entries[index] != entry:
                raise Violation(
                    f"seed {self.seed}: leader {node.id} of term {term} lacks committed entry {index} {entry}"
                )
        self._check_log_matching()

    def _apply(self, node: SimNode, commit: int) -> None:
        entries = node.entries
        for i in range(node.applied + 1, commit + 1):
            known = self.committed.setdefault(i, entries[i])
            if known != entries[i]:
                raise Violation(
                    f"seed {self.seed}: {node.id} applies {entries[i]} at {i}, another applied {known}"
                )
        node.applied = max(node.applied, commit)
        acked, _ = node.pending.settle(commit, lambda i: entries[i].term)
        for index, body in acked:
            if entries[index].body != body:
                raise Violation(
                    f"seed {self.seed}: entry {index} of term {entries[index].term} changed its body"
                )
            self.acked[index] = body

    def leader(self) -> SimNode | None:
        """The leader of the highest term among the nodes up (a deposed one may not know yet)."""
        leaders = [n for n in self.nodes.values() if n.raft is not None and n.raft.role is Role.LEADER]
        return max(leaders, key=lambda n: n.raft.term) if leaders else None

    def _client(self) -> None:
        up = [n for n in self.nodes.values() if n.raft is not None]
        if not up or self.now > self.end_ms - 3000:
            return
        leader = self.leader()
        node = leader if leader is not None and self.rng.random() < 0.9 else self.rng.choice(up)
        raft = node.raft
        assert raft is not None
        bodies = []
        for _ in range(self.rng.randint(1, 4)):
            self._next_body += 1
            bodies.append(b"m%d" % self._next_body)
        try:
            first = raft.propose(bodies)
        except NotLeader:
            return
        self.proposed += len(bodies)
        for i, body in enumerate(bodies):
            node.pending.add(first + i, raft.term, (first + i, body))
        self._process(node)

    # -- checks -----------------------------------------------------------------------------------

    def _check_log_matching(self) -> None:
        logs = [n.entries for n in self.nodes.values() if n.raft is not None]
        for a in range(len(logs)):
            for b in range(a + 1, len(logs)):
                x, y = logs[a], logs[b]
                i = min(len(x), len(y)) - 1
                while i >= 0 and x[i].term != y[i].term:
                    i -= 1
                if x[: i + 1] != y[: i + 1]:
                    raise Violation(f"seed {self.seed}: logs agree at {i} but differ before it")

    def _converged(self) -> bool:
        leader = self.leader()
        if leader is None or leader.raft is None:
            return False
        commit = leader.raft.commit
        return commit >= 0 and all(
            n.raft is not None and n.raft.commit == commit for n in self.nodes.values()
        )

    def _check_end(self) -> None:
        self._check_log_matching()
        leader = self.leader()
        if leader is None:
            raise Violation(
                f"seed {self.seed}: no leader {self.end_ms - self.fault_ms} ms after the faults stopped"
            )
        assert leader.raft is not None
        entries = leader.entries
        for index, body in self.acked.items():
            if index > leader.raft.commit or entries[index].body != body:
                raise Violation(f"seed {self.seed}: acknowledged append {index} {body!r} lost")
        for node in self.nodes.values():
            assert node.raft is not None
            if node.raft.commit != leader.raft.commit:
                raise Violation(
                    f"seed {self.seed}: {node.id} committed {node.raft.commit}, leader {leader.raft.commit}"
                )


def run_seed(seed: int, **kw) -> Cluster:
    """Run a seed; the logs' files are closed after it, whatever happened (a process runs thousands)."""
    cluster = Cluster(seed, **kw)
    try:
        return cluster.run()
    finally:
        cluster.close()


def calm() -> Faults:
    """A network that only delays (1-5 ms), and no scheduled faults."""
    return Faults(
        drop=0.0, duplicate=0.0, reorder=0.0, delay_ms=(1, 5), fault_every_ms=10**9, crash_before_sync=0.0
    )


def leader_failover(seed: int, config: RaftConfig) -> tuple[int, Cluster]:
    """Crash the leader of a calm group of 3 after 5 s of traffic; return the milliseconds until an
    append is acknowledged again, and the cluster (30 s without one is a Violation)."""
    c = Cluster(seed, size=3, faults=calm(), fault_ms=0, heal_ms=60_000, config=config)
    c.run_until(lambda when: when > 5000)
    leader = c.leader()
    if leader is None:
        raise Violation(f"seed {seed}: no leader after 5 s")
    c.crash(leader, 120_000)
    crashed_at, acked = c.now, len(c.acked)
    c.run_until(lambda when: len(c.acked) > acked or when > crashed_at + 30_000)
    if len(c.acked) == acked:
        raise Violation(f"seed {seed}: nothing acknowledged within 30 s of the leader's crash")
    return c.now - crashed_at, c
