"""The Raft group that replicates the controller state, on pysyncobj.

pysyncobj runs its own thread: committed events are applied there under a lock, and the asyncio side
reads the state under the same lock and awaits commits through futures. The log and snapshots live in
the data directory, so a restarted controller comes back with everything that was committed.
"""

from __future__ import annotations

import _socket
import asyncio
import logging
import socket
import threading
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated

from ferrymq.controller.state import Event, ReplicasState

# pysyncobj (0.3.x) replaces socket.inet_ntop with a Windows-only version on every platform, for the
# whole process; put the real one back.
socket.inet_ntop = _socket.inet_ntop

log = logging.getLogger(__name__)


class CommitError(Exception):
    """The events were not committed (leadership lost, or no quorum in time)."""


class _ReplicatedState(SyncObjConsumer):
    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock  # set before the consumer's init: not part of the snapshot
        super().__init__()
        self.state = ReplicasState()

    @replicated
    def commit(self, events: list[Event]) -> list[bool]:
        with self._lock:
            return [self.state.apply(event) for event in events]


class RaftGroup:
    def __init__(
        self,
        self_address: str,
        peer_addresses: list[str],
        data_dir: Path,
        on_leadership_change: Callable[[], None],
        *,
        election_timeout: tuple[float, float] = (0.4, 1.4),
        password: str = "",
    ) -> None:
        """`password`: the group's shared secret; every Raft message is then encrypted and
        authenticated with it (pysyncobj's Fernet), and a node without it cannot take part."""
        data_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._replicated = _ReplicatedState(self._lock)
        conf = SyncObjConf(
            fullDumpFile=str(data_dir / "raft.dump"),
            journalFile=str(data_dir / "raft.journal"),
            raftMinTimeout=election_timeout[0],
            raftMaxTimeout=election_timeout[1],
            # A leader cut off from its quorum steps down within this, so it cannot keep confirming a
            # broker master for long after the others elected a new one (see broker/replicas.py).
            leaderFallbackTimeout=election_timeout[1],
            useFork=False,  # never fork a process that runs an event loop
            onStateChanged=lambda _old, _new: on_leadership_change(),
            dynamicMembershipChange=False,
            password=password or None,
        )
        self._sync = SyncObj(self_address, peer_addresses, conf, consumers=[self._replicated])
        self.self_address = self_address

    @property
    def is_leader(self) -> bool:
        return self._sync._isLeader()

    @property
    def leader(self) -> str | None:
        """The Raft address of the leader as last known (may be stale by an election)."""
        leader = self._sync._getLeader()
        return None if leader is None else getattr(leader, "address", str(leader))

    @contextmanager
    def reading(self):
        """The state, held still (no commit is applied meanwhile)."""
        with self._lock:
            yield self._replicated.state

    async def commit(self, events: list[Event], timeout: float = 5.0) -> list[bool]:
        """Replicate ``events`` and wait until they are applied here; per event, whether it took."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[bool]] = loop.create_future()

        def finished(result, error) -> None:
            def resolve() -> None:
                if done.done():
                    return
                if error == FAIL_REASON.SUCCESS:
                    done.set_result(result)
                else:
                    done.set_exception(CommitError(f"not committed (pysyncobj reason {error})"))

            loop.call_soon_threadsafe(resolve)

        self._replicated.commit(events, callback=finished)
        try:
            async with asyncio.timeout(timeout):
                return await done
        except TimeoutError:
            raise CommitError(f"not committed within {timeout:g} s (no quorum?)") from None

    def close(self) -> None:
        self._sync.destroy()
