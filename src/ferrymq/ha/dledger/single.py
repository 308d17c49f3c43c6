"""DLedger's single log on the broker: the CommitLog is the Raft log (commitlog_log.py).

A leader's put writes its records with the store's own put at the place the next entry's body
takes (`CommitLogRaftLog.place`) and proposes them as that entry's body: the header goes before
them, and nothing is written twice. Followers append the entries' bytes as they come. On every
member a commit moves the dispatcher's `limit` to the committed entries' end, so ConsumeQueues,
the index and long polls see committed messages only, and the dispatched end is the applied mark:
nothing else is saved. A batch is one entry, its records back to back in the body.

A store that a two-file group wrote (`FileLog` beside the CommitLog, `applied_to`) keeps running
as it was (node.py): moving it onto the single log needs a migration (docs/dledger.md).
"""

from __future__ import annotations

import logging
from pathlib import Path

from ferrymq.ha.dledger import command
from ferrymq.ha.dledger import entry as codec
from ferrymq.ha.dledger.apply import put
from ferrymq.ha.dledger.commitlog_log import CommitLogRaftLog
from ferrymq.ha.dledger.node import DLedgerNode
from ferrymq.protocol.batch import batch_records_size, scan_batch
from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.record import record_size, topic_block
from ferrymq.store import MessageStore, PutResult, PutStatus

log = logging.getLogger(__name__)


def uses_single_log(root: Path) -> bool:
    """Whether the DLedger member under `root` runs the single log: a new member does, one whose
    Raft log is a `FileLog` (two files) does not."""
    two_files = ("applied_to", "applied", "data")
    return not any((root / name).exists() for name in two_files) and not any(root.glob("*.data"))


def records_size(store: MessageStore, c: command.PutCommand) -> int | None:
    """The CommitLog bytes the store's put of `c` writes (None: a batch it will refuse)."""
    raw = c.topic.encode(errors="replace")
    born = c.born_host or store.store_host
    if c.batch:
        try:
            count = scan_batch(c.body)[0]
        except MessageDecodeError:
            return None
        return batch_records_size(len(c.body), count, topic_block(raw), born, store.store_host)
    return record_size(len(c.body), len(raw), len(c.properties), len(born), len(store.store_host))


def write_entry_body(
    store: MessageStore, raft_log: CommitLogRaftLog, c: command.PutCommand
) -> tuple[memoryview, PutResult] | PutResult:
    """A leader's put: the records of `c` written where the next entry's body goes, that body and
    the store's result (the put's answer once the entry commits), or why not. The queue entries the
    put prepared are moved to the entry's start, where the dispatch will find them."""
    size = records_size(store, c)
    if size is None:
        return put(store, c)  # refused: the store says why
    try:
        pos = raft_log.place(codec.BODY_OFFSET + size)
    except codec.EntryError as e:
        return PutResult(PutStatus.MESSAGE_ILLEGAL, str(e))
    result = put(store, c)
    at = pos + codec.BODY_OFFSET
    body = store.commitlog.read(at, size) if result.ok and result.wrote_offset == at else None
    if body is not None and result.wrote_bytes == size:
        prepared = store.dispatcher.prepared
        if prepared and prepared[-1].start == at:
            prepared[-1] = prepared[-1]._replace(start=pos)
        return body, result
    if result.ok:  # never expected: the size above is the store's own
        log.error("DLedger log %s: a put wrote %d bytes at %d, not %d at %d", raft_log.root,
                  result.wrote_bytes, result.wrote_offset, size, at)  # fmt: skip
        store.truncate(raft_log.unplace_last())
        return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "the records did not land in their entry")
    raft_log.unplace_last()
    return result


class SingleLogNode(DLedgerNode):
    log: CommitLogRaftLog

    def _open_log(self) -> CommitLogRaftLog:
        store = self.applier.store
        raft_log = CommitLogRaftLog(self.settings.root, store.commitlog, store.dispatcher)
        store.hold_entries(raft_log.divided)
        store.dispatcher.limit = store.dispatcher.offset  # the rest waits for the leader's commit
        return raft_log

    def _recover_applied(self) -> int:
        """Nothing is known committed before the leader says so (the commit index is not saved)."""
        return -1

    def _close_log(self) -> None:
        self.log.close()

    def after_flush(self, log_synced: int) -> None:
        """Retention by the CommitLog's rules below what is committed and durable here; the
        ConsumeQueue and index files of the segments deleted follow."""
        first = self.log.first_index
        if self.retention.run(min(self.applied, log_synced)) != first:
            self.applier.store.trimmed()

    def _proposal(self, c: command.PutCommand) -> tuple[memoryview, PutResult] | PutResult:
        return write_entry_body(self.applier.store, self.log, c)

    def _refused(self) -> None:
        """Bodies placed and not proposed go, with the queue offsets their puts took."""
        store = self.applier.store
        if store.commitlog.max_offset != self.log.end:
            store.truncate(self.log.end)
        self.log.unplace()

    def _apply(self, commit: int) -> None:
        """Committed entries become visible: dispatch goes up to their end; answer their puts."""
        if commit >= self.log.first_index:
            self.applier.store.dispatcher.limit = self.log.end_of(commit)
            self.applier.written()
        self.applied = commit
        acked, replaced = self.pending.settle(commit, self.log.term_at)
        proposed = self._proposed
        for index, fut in acked:
            own = proposed.pop(index, None)
            if not fut.done():
                fut.set_result(own[1] if own else PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "not applied"))
        for index, fut in replaced:
            proposed.pop(index, None)
            if not fut.done():
                fut.set_result(PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "replaced by a new DLedger leader"))
