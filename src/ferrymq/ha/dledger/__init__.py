"""DLedger mode: a broker group's sends replicated by our own Raft.

`raft` is the consensus core as a pure state machine (no sockets, files or clocks), `log` the
interface it reads and writes entries through, `entry` DLedger's on-disk entry layout and
`filelog` a log kept in a file of such entries. `node` drives the core on the broker's event loop,
`transport` carries its messages between members, `command` and `apply` turn committed entries
into puts on each member's store. See docs/dledger.md for what is wired and what is not.
"""
