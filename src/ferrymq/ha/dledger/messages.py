"""The messages Raft nodes exchange. Every message carries its sender's term."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ferrymq.ha.dledger.log import Entry


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """A (pre-)vote request; a pre-vote asks for `term` without anyone moving to it yet."""

    src: str
    dst: str
    term: int
    last_index: int
    last_term: int
    pre: bool = False
    transfer: bool = False  # sent on the leader's TimeoutNow: voters ignore their leader lease


@dataclass(frozen=True, slots=True)
class VoteResponse:
    src: str
    dst: str
    term: int
    granted: bool
    pre: bool = False


@dataclass(frozen=True, slots=True)
class Append:
    """Entries after (prev_index, prev_term), or none as a heartbeat; `commit` is the leader's."""

    src: str
    dst: str
    term: int
    prev_index: int
    prev_term: int
    entries: Sequence[Entry]
    commit: int


@dataclass(frozen=True, slots=True)
class AppendResponse:
    """Success with the follower's matching index, or a rejection of `reject_index` with a hint
    (or, `refused`, of an entry its log would not hold, the entries before it held: `match_index`).

    The hint lets the leader back off a whole term at a time: `conflict_term` is the follower's term
    at the rejected index (-1 when its log is shorter) and `conflict_index` the first index the
    follower holds of that term (or its log's end + 1).
    """

    src: str
    dst: str
    term: int
    success: bool
    match_index: int = -1
    reject_index: int = -1
    conflict_index: int = -1
    conflict_term: int = -1
    refused: bool = False  # the follower's log would not hold entry `reject_index` (log.EntryRefused)


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """The leader hands over: the receiver, caught up, starts an election at once."""

    src: str
    dst: str
    term: int


Message = VoteRequest | VoteResponse | Append | AppendResponse | TimeoutNow
