"""A Raft node as a pure state machine: messages, ticks and proposals in, a `Ready` out.

Nothing here touches a socket, a file or a clock, so a seeded simulation can drive thousands of
clusters through drops, partitions and crashes, and the broker can drive the same code over its
remoting transport. The driver:

1. feeds the node inbound messages (`step`), clock ticks (`tick`), client data (`propose`) and
   operator requests (`transfer_leadership`);
2. takes `ready()` and, in this order, persists `hard_state` (term and vote), makes the log durable
   from `unsynced_from` on, sends `messages`, then hands entries up to `commit` to consumers.

Persisting before sending is what lets a vote or an acknowledgement survive a crash. A client's
append counts as acknowledged once the leader's commit index reaches its index *and* the entry at
that index still has the term the append got (a new leader may have replaced an uncommitted one).

Beyond the Raft paper: pre-vote (a node that cannot win does not raise terms), check-quorum with a
leader lease (a leader that lost its majority steps down; nodes that hear a leader ignore votes),
leadership transfer (TimeoutNow) and a preferred leader, a conflict hint that backs a follower off a
whole term at a time, and pipelined batches of appends per follower.
"""

from __future__ import annotations

import enum
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ferrymq.ha.dledger.entry import MAGIC_NOOP, MAGIC_NORMAL
from ferrymq.ha.dledger.log import Entry, EntryRefused, RaftLog
from ferrymq.ha.dledger.messages import Append, AppendResponse, Message, TimeoutNow, VoteRequest, VoteResponse


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class NotLeader(Exception):
    """Proposals go to the leader; `leader_id` is the one this node knows of, if any."""

    def __init__(self, leader_id: str | None) -> None:
        super().__init__(f"not the leader (leader: {leader_id or 'unknown'})")
        self.leader_id = leader_id


class RaftSafetyError(AssertionError):
    """The node was asked to break a Raft invariant (a bug elsewhere, or a corrupted log)."""


@dataclass(frozen=True)
class RaftConfig:
    election_ticks: int = 10  # election timeout: random in [election_ticks, 2 * election_ticks)
    heartbeat_ticks: int = 2
    max_append_entries: int = 1024
    max_append_bytes: int = 1 << 20
    max_inflight: int = 8  # appends on the wire per follower
    # a proposal goes out at once only to followers with fewer appends in flight; the others get it
    # with the append their next acknowledgement sends, batched with what came meanwhile (None: the
    # whole window, max_inflight)
    eager_inflight: int | None = None
    pre_vote: bool = True
    check_quorum: bool = True
    preferred_leader: str | None = None
    preferred_retry_ticks: int = 100  # wait after a failed hand-over to the preferred leader

    def __post_init__(self) -> None:
        if self.heartbeat_ticks < 1 or self.election_ticks <= self.heartbeat_ticks:
            raise ValueError("need 1 <= heartbeat_ticks < election_ticks")
        if self.max_append_entries < 1 or self.max_inflight < 1:
            raise ValueError("max_append_entries and max_inflight must be >= 1")
        if self.eager_inflight is not None and self.eager_inflight < 1:
            raise ValueError("eager_inflight must be >= 1")


@dataclass(frozen=True)
class HardState:
    """What must be on disk before the node answers anyone: its term and whom it voted for in it."""

    term: int = 0
    voted_for: str | None = None


@dataclass(frozen=True)
class SoftState:
    role: Role
    leader_id: str | None
    term: int


@dataclass
class Ready:
    hard_state: HardState | None = None
    unsynced_from: int | None = None  # log written or truncated from here: fsync before sending
    messages: list[Message] = field(default_factory=list)
    commit: int | None = None  # new commit index
    soft_state: SoftState | None = None  # role, leader or term changed


@dataclass
class Progress:
    """The leader's view of one follower."""

    next: int
    match: int = -1
    probing: bool = True  # one append at a time until the logs are known to match
    paused: bool = False  # probing, with an append outstanding
    inflight: deque[int] = field(default_factory=deque)  # last index of each unacknowledged append
    active: bool = False  # heard from since the last quorum check
    match_at_heartbeat: int = -1  # match when the last heartbeat went out: no progress since means loss


class RaftNode:
    def __init__(
        self,
        node_id: str,
        peers: Sequence[str],
        log: RaftLog,
        hard_state: HardState,
        rng: random.Random,
        config: RaftConfig | None = None,
    ) -> None:
        if node_id not in peers or len(set(peers)) != len(peers):
            raise ValueError(f"peers {list(peers)} must list {node_id} once")
        self.id = node_id
        self.peers = tuple(peers)
        self.others = tuple(p for p in peers if p != node_id)
        self.quorum = len(peers) // 2 + 1
        self.log = log
        self.cfg = config or RaftConfig()
        self.rng = rng
        self.term = hard_state.term
        self.voted_for = hard_state.voted_for
        self.role = Role.FOLLOWER
        self.leader_id: str | None = None
        self.commit = -1
        self.elapsed = 0
        self.heartbeat_elapsed = 0
        self.timeout = self._random_timeout()
        self.votes: dict[str, bool] = {}
        self.progress: dict[str, Progress] = {}
        self.transfer_target: str | None = None
        self.transfer_elapsed = 0
        self.preferred_wait = 0
        self._messages: list[Message] = []
        self._hard_dirty = False
        self._unsynced_from: int | None = None
        self._reported_commit = -1
        self._reported_soft = self.soft_state

    # -- driver interface ------------------------------------------------------------------------

    @property
    def soft_state(self) -> SoftState:
        return SoftState(self.role, self.leader_id, self.term)

    def has_ready(self) -> bool:
        return bool(
            self._messages
            or self._hard_dirty
            or self._unsynced_from is not None
            or self.commit != self._reported_commit
            or self.soft_state != self._reported_soft
        )

    def ready(self) -> Ready:
        """What the driver must do now, in order: persist, sync, send, apply. Clears it."""
        out = Ready(messages=self._messages, unsynced_from=self._unsynced_from)
        if self._hard_dirty:
            out.hard_state = HardState(self.term, self.voted_for)
        if self.commit != self._reported_commit:
            out.commit = self._reported_commit = self.commit
        soft = self.soft_state
        if soft != self._reported_soft:
            out.soft_state = self._reported_soft = soft
        self._messages = []
        self._hard_dirty = False
        self._unsynced_from = None
        return out

    def tick(self) -> None:
        """One clock tick (the driver's tick length sets what election_ticks means in seconds)."""
        if self.role is Role.LEADER:
            self._tick_leader()
        else:
            self.elapsed += 1
            if self.elapsed >= self.timeout:
                self._campaign(pre=self.cfg.pre_vote)

    def propose(self, bodies: Sequence[bytes | memoryview]) -> int:
        """Append client data on the leader; returns the first entry's index (term: `self.term`)."""
        if self.role is not Role.LEADER or self.transfer_target is not None:
            raise NotLeader(None if self.role is Role.LEADER else self.leader_id)
        if not bodies:
            raise ValueError("nothing to propose")
        first = self.log.last_index + 1
        self._append_local([Entry(first + i, self.term, b, MAGIC_NORMAL) for i, b in enumerate(bodies)])
        eager = self.cfg.eager_inflight or self.cfg.max_inflight
        for peer in self.others:
            if len(self.progress[peer].inflight) < eager:
                self._send_append(peer)
        return first

    def stranded(self) -> list[str]:
        """Followers this leader cannot bring up to date: they lack entries its log no longer holds
        (DLedger has no snapshot either; such a member is repaired by hand, see docs/dledger.md)."""
        if self.role is not Role.LEADER:
            return []
        return [p for p, pr in self.progress.items() if pr.next < self.log.first_index]

    def transfer_leadership(self, target: str) -> None:
        """Hand leadership to `target` once it has the whole log; proposals are refused meanwhile."""
        if self.role is not Role.LEADER:
            raise NotLeader(self.leader_id)
        if target not in self.others:
            raise ValueError(f"{target!r} is not another member of {list(self.peers)}")
        self.transfer_target = target
        self.transfer_elapsed = 0
        if self.progress[target].match == self.log.last_index:
            self._send(TimeoutNow(self.id, target, self.term))
        else:
            self._send_append(target)

    def step(self, m: Message) -> None:
        """Take one inbound message (duplicated, late and reordered ones included)."""
        if m.dst != self.id or m.src not in self.others:
            return
        if m.term > self.term:
            if isinstance(m, VoteRequest):
                if self._in_lease() and not m.transfer:
                    return
                if not m.pre:
                    self._become_follower(m.term, None)
            elif isinstance(m, VoteResponse) and m.pre and m.granted:
                pass  # granted pre-votes carry the term asked for, not a newer one
            else:
                self._become_follower(m.term, m.src if isinstance(m, Append | TimeoutNow) else None)
        elif m.term < self.term:
            if isinstance(m, Append):
                # a deposed leader learns the new term and steps down
                self._send(AppendResponse(self.id, m.src, self.term, False, reject_index=m.prev_index))
            elif isinstance(m, VoteRequest) and m.pre:
                self._send(VoteResponse(self.id, m.src, self.term, False, pre=True))
            return
        if isinstance(m, VoteRequest):
            self._on_vote_request(m)
        elif isinstance(m, VoteResponse):
            self._on_vote_response(m)
        elif isinstance(m, Append):
            if self.role is Role.LEADER:
                raise RaftSafetyError(f"{self.id}: two leaders in term {self.term} ({m.src})")
            self._become_follower(self.term, m.src)
            self._on_append(m)
        elif isinstance(m, AppendResponse):
            if self.role is Role.LEADER:
                self._on_append_response(m)
        elif isinstance(m, TimeoutNow) and self.role is not Role.LEADER:
            self._campaign(pre=False, transfer=True)

    # -- elections --------------------------------------------------------------------------------

    def _random_timeout(self) -> int:
        return self.cfg.election_ticks + self.rng.randrange(self.cfg.election_ticks)

    def _in_lease(self) -> bool:
        """Heard from a live leader within the minimum election timeout: ignore vote requests."""
        return self.cfg.check_quorum and self.leader_id is not None and self.elapsed < self.cfg.election_ticks

    def _log_up_to_date(self, last_index: int, last_term: int) -> bool:
        mine = self.log.term_at(self.log.last_index)
        return last_term > mine or (last_term == mine and last_index >= self.log.last_index)

    def _campaign(self, pre: bool, transfer: bool = False) -> None:
        self.elapsed = 0
        self.timeout = self._random_timeout()
        self.leader_id = None
        if pre:
            self.role = Role.PRE_CANDIDATE
            term = self.term + 1
        else:
            self.role = Role.CANDIDATE
            self.term += 1
            self.voted_for = self.id
            self._hard_dirty = True
            term = self.term
        self.votes = {self.id: True}
        if self.quorum == 1:
            self._won(pre)
            return
        last = self.log.last_index
        for peer in self.others:
            self._send(VoteRequest(self.id, peer, term, last, self.log.term_at(last), pre, transfer))

    def _won(self, pre: bool) -> None:
        if pre:
            self._campaign(pre=False)
        else:
            self._become_leader()

    def _on_vote_request(self, m: VoteRequest) -> None:
        if m.pre:
            can = (
                m.term > self.term
                or self.voted_for == m.src
                or (self.voted_for is None and self.leader_id is None)
            )
        else:
            can = self.voted_for == m.src or (self.voted_for is None and self.leader_id is None)
        if can and self._log_up_to_date(m.last_index, m.last_term):
            if not m.pre:
                self.voted_for = m.src
                self._hard_dirty = True
                self.elapsed = 0
            self._send(VoteResponse(self.id, m.src, m.term, True, m.pre))
        else:
            self._send(VoteResponse(self.id, m.src, self.term, False, m.pre))

    def _on_vote_response(self, m: VoteResponse) -> None:
        if m.pre:
            if self.role is not Role.PRE_CANDIDATE or (m.granted and m.term != self.term + 1):
                return
        elif self.role is not Role.CANDIDATE or m.term != self.term:
            return
        self.votes[m.src] = m.granted
        granted = sum(self.votes.values())
        if granted >= self.quorum:
            self._won(m.pre)
        elif len(self.votes) - granted >= self.quorum:
            self._become_follower(self.term, None)

    def _become_follower(self, term: int, leader: str | None) -> None:
        if term > self.term:
            self.term = term
            self.voted_for = None
            self._hard_dirty = True
        if self.role is not Role.FOLLOWER or leader is not None:
            self.elapsed = 0
        if self.role is not Role.FOLLOWER:
            self.timeout = self._random_timeout()
        self.role = Role.FOLLOWER
        self.leader_id = leader
        self.progress = {}
        self.transfer_target = None

    def _become_leader(self) -> None:
        self.role = Role.LEADER
        self.leader_id = self.id
        self.elapsed = self.heartbeat_elapsed = 0
        self.transfer_target = None
        nxt = self.log.last_index + 1
        self.progress = {p: Progress(next=nxt) for p in self.others}
        # an entry of the new term: earlier terms' entries commit with it (Raft's commit rule)
        self._append_local([Entry(nxt, self.term, b"", MAGIC_NOOP)])
        for peer in self.others:
            self._send_append(peer, heartbeat=True)

    # -- leader -----------------------------------------------------------------------------------

    def _tick_leader(self) -> None:
        self.elapsed += 1
        self.heartbeat_elapsed += 1
        if self.transfer_target is not None:
            self.transfer_elapsed += 1
            if self.transfer_elapsed >= self.cfg.election_ticks:  # the target did not take over
                self.transfer_target = None
                self.preferred_wait = self.cfg.preferred_retry_ticks
        self.preferred_wait = max(0, self.preferred_wait - 1)
        if self.elapsed >= self.cfg.election_ticks:
            self.elapsed = 0
            if self.cfg.check_quorum:
                if 1 + sum(p.active for p in self.progress.values()) < self.quorum:
                    self._become_follower(self.term, None)
                    return
                for p in self.progress.values():
                    p.active = False
        if self.heartbeat_elapsed >= self.cfg.heartbeat_ticks:
            self.heartbeat_elapsed = 0
            for peer in self.others:
                self._heartbeat(peer)
            self._maybe_hand_to_preferred()

    def _heartbeat(self, peer: str) -> None:
        pr = self.progress[peer]
        if pr.probing:
            pr.paused = False
        elif pr.inflight and pr.match == pr.match_at_heartbeat:
            # nothing acknowledged for a whole heartbeat: assume loss, resend from the match
            pr.probing, pr.paused, pr.next = True, False, pr.match + 1
            pr.inflight.clear()
        pr.match_at_heartbeat = pr.match
        self._send_append(peer, heartbeat=True)

    def _maybe_hand_to_preferred(self) -> None:
        target = self.cfg.preferred_leader
        if (
            target in self.others
            and self.transfer_target is None
            and self.preferred_wait == 0
            and self.progress[target].match == self.log.last_index
        ):
            self.transfer_leadership(target)

    def _append_local(self, entries: list[Entry]) -> None:
        self.log.append(entries)
        if self._unsynced_from is None:
            self._unsynced_from = entries[0].index
        if self.quorum == 1:
            self._maybe_commit()

    def _send_append(self, peer: str, heartbeat: bool = False) -> None:
        """Send the follower what it lacks, if its window allows; a heartbeat goes out regardless."""
        pr = self.progress[peer]
        blocked = pr.paused if pr.probing else len(pr.inflight) >= self.cfg.max_inflight
        entries: Sequence[Entry] = ()
        first = self.log.first_index
        if not blocked and first <= pr.next <= self.log.last_index:
            entries = self.log.read(pr.next, self.cfg.max_append_entries, self.cfg.max_append_bytes)
        if not entries and not heartbeat:
            return
        # an empty heartbeat behind appends still in flight names the known match, so it cannot
        # overtake them and be rejected; one whose entries were trimmed asks whether the follower
        # holds the entry before the first kept (if not, it cannot catch up: see stranded())
        prev = max(pr.next - 1 if entries or pr.probing else pr.match, first - 1)
        self._send(Append(self.id, peer, self.term, prev, self.log.term_at(prev), entries, self.commit))
        if entries:
            if pr.probing:
                pr.paused = True
            else:
                pr.next = entries[-1].index + 1
                pr.inflight.append(entries[-1].index)

    def _on_append_response(self, m: AppendResponse) -> None:
        if m.match_index > self.log.last_index:
            return  # claims entries this leader never had: not an answer to it
        pr = self.progress[m.src]
        pr.active = True
        if m.refused:
            self._refused(pr, m)
            return
        if not m.success:
            if m.reject_index <= pr.match or m.reject_index > self.log.last_index:
                return  # late (the follower has matched beyond it since), or not about anything sent
            nxt = m.conflict_index
            if m.conflict_term >= 0:
                i = min(m.reject_index, self.log.last_index)
                while i > pr.match and self._term(i) > m.conflict_term:
                    i -= 1
                if i > pr.match and self._term(i) == m.conflict_term:
                    nxt = i + 1
            pr.next = max(pr.match + 1, min(nxt, m.reject_index))
            pr.probing, pr.paused = True, False
            pr.inflight.clear()
            self._send_append(m.src)
            return
        if m.match_index > pr.match:
            pr.match = m.match_index
            pr.next = max(pr.next, pr.match + 1)
            if pr.probing:
                pr.probing = False
                pr.inflight.clear()
            while pr.inflight and pr.inflight[0] <= pr.match:
                pr.inflight.popleft()
            self._maybe_commit()
            if m.src == self.transfer_target and pr.match == self.log.last_index:
                self._send(TimeoutNow(self.id, m.src, self.term))
        pr.paused = False
        self._send_append(m.src)

    def _refused(self, pr: Progress, m: AppendResponse) -> None:
        """The follower's log would not hold entry `reject_index` (log.EntryRefused): it holds the
        entries before it, and is sent it again from the next heartbeat on, not at once (the same
        bytes would be refused again at once)."""
        if m.reject_index <= pr.match or m.reject_index > self.log.last_index:
            return  # late, or not about anything sent
        if m.match_index > pr.match:
            pr.match = m.match_index
            self._maybe_commit()
        pr.next, pr.probing, pr.paused = m.reject_index, True, True
        pr.inflight.clear()

    def _maybe_commit(self) -> None:
        matches = sorted([self.log.last_index, *(p.match for p in self.progress.values())], reverse=True)
        n = matches[self.quorum - 1]
        if n > self.commit and self._term(n) == self.term:
            self.commit = n

    # -- follower ---------------------------------------------------------------------------------

    def _on_append(self, m: Append) -> None:
        log = self.log
        last = log.last_index
        entries = m.entries
        if m.prev_index < -1 or (
            entries
            and (entries[0].index != m.prev_index + 1 or entries[-1].index != m.prev_index + len(entries))
        ):
            return  # not a run of entries after prev_index: no Raft node sends that
        if m.prev_index > last:
            self._reject(m, conflict_index=last + 1, conflict_term=-1)
            return
        if m.prev_index < log.first_index - 1:
            rest = self._past_trimmed(m)
            if rest is None:
                self._send(
                    AppendResponse(self.id, m.src, self.term, True, match_index=m.prev_index + len(entries))
                )
                return
            m, entries = rest, rest.entries
        prev_term = log.term_at(m.prev_index)
        if prev_term != m.prev_term:
            i = m.prev_index
            while i - 1 > self.commit and self._term(i - 1) == prev_term:
                i -= 1
            self._reject(m, conflict_index=i, conflict_term=prev_term)
            return
        k = 0  # skip what this log already holds (a duplicate or an overlapping append)
        while (
            k < len(entries) and entries[k].index <= last and log.term_at(entries[k].index) == entries[k].term
        ):
            k += 1
        if k < len(entries):
            first = entries[k].index
            if first <= last:
                if first <= self.commit:
                    raise RaftSafetyError(f"{self.id}: leader {m.src} conflicts with committed entry {first}")
                log.truncate(first)
            refused = None
            try:
                log.append(entries[k:])
            except EntryRefused as e:
                refused = e.index
            if self._unsynced_from is None or first < self._unsynced_from:
                self._unsynced_from = first
            if refused is not None:  # held up to the entry before; the leader tries it again later
                self._send(
                    AppendResponse(
                        self.id, m.src, self.term, False, match_index=refused - 1, reject_index=refused,
                        conflict_index=refused, refused=True,
                    )
                )  # fmt: skip
                return
        last_new = m.prev_index + len(entries)
        if min(m.commit, last_new) > self.commit:
            self.commit = min(m.commit, last_new)
        self._send(AppendResponse(self.id, m.src, self.term, True, match_index=last_new))

    def _past_trimmed(self, m: Append) -> Append | None:
        """`m` from the entry before the first this log keeps (None: it holds only trimmed ones).
        Entries are trimmed once applied, so committed: every leader holds them as they are here,
        and only the rest needs checking."""
        before = self.log.first_index - 1
        skip = before - m.prev_index
        if len(m.entries) < skip:
            return None
        prev_term = m.entries[skip - 1].term if skip else m.prev_term
        return replace(m, prev_index=before, prev_term=prev_term, entries=m.entries[skip:])

    def _term(self, index: int) -> int:
        """The term at `index`, or -1 where the log was trimmed (those entries are committed, so
        they never decide a conflict or a commit)."""
        return self.log.term_at(index) if index >= self.log.first_index - 1 else -1

    def _reject(self, m: Append, conflict_index: int, conflict_term: int) -> None:
        self._send(
            AppendResponse(
                self.id,
                m.src,
                self.term,
                False,
                reject_index=m.prev_index,
                conflict_index=conflict_index,
                conflict_term=conflict_term,
            )
        )

    def _send(self, m: Message) -> None:
        self._messages.append(m)
