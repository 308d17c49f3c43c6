"""A node's term and vote on disk, in DLedger's `currterm` properties file (currTerm, voteLeader).

Saved to a temporary file, fsynced and renamed over the old one (then the directory fsynced), so a
crash leaves the old state or the new one, never half of each: a node that answered a vote must
remember it after any crash.
"""

from __future__ import annotations

import os
from pathlib import Path

from ferrymq.ha.dledger.raft import HardState

FILE_NAME = "currterm"


def save(root: Path, state: HardState) -> None:
    text = f"currTerm={state.term}\n" + (f"voteLeader={state.voted_for}\n" if state.voted_for else "")
    tmp = root / (FILE_NAME + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / FILE_NAME)
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load(root: Path) -> HardState:
    """The saved state; a node that never saved one starts at term 0 with no vote."""
    path = root / FILE_NAME
    if not path.exists():
        return HardState()
    props = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"{path}: not a property line: {line!r}")
            props[key.strip()] = value.strip()
    try:
        term = int(props["currTerm"])
    except (KeyError, ValueError):
        raise ValueError(f"{path}: no valid currTerm") from None
    if term < 0:
        raise ValueError(f"{path}: negative currTerm {term}")
    return HardState(term, props.get("voteLeader") or None)
