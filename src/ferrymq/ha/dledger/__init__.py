"""DLedger mode: the CommitLog replicated by our own Raft.

`raft` is the consensus core as a pure state machine (no sockets, files or clocks), `log` the
interface it reads and writes entries through, `entry` DLedger's on-disk entry layout and
`filelog` a log kept in a file of such entries. See docs/dledger.md for what is wired and what is not.
"""
