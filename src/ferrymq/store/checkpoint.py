"""The `checkpoint` file: how far the store is known durable, so recovery knows where to start.

RocketMQ's 4 KiB layout (physicMsgTimestamp @0, logicsMsgTimestamp @8, indexMsgTimestamp @16,
masterFlushedOffset @24, confirmPhyOffset @32) plus ferrymq's dispatched offset @40: every record
before it is flushed in the CommitLog and has its ConsumeQueue and index entries flushed too.
"""

from __future__ import annotations

import struct
from dataclasses import astuple, dataclass
from pathlib import Path

from ferrymq.store.files import atomic_write, durable_copies

_LAYOUT = struct.Struct(">qqqqqq")
FILE_SIZE = 4096


@dataclass
class Checkpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    dispatched_offset: int = 0

    @classmethod
    def load(cls, path: Path) -> Checkpoint | None:
        for _, data in durable_copies(path):
            if len(data) >= _LAYOUT.size:
                return cls(*_LAYOUT.unpack_from(data))
        return None

    def save(self, path: Path) -> None:
        data = bytearray(FILE_SIZE)
        _LAYOUT.pack_into(data, 0, *astuple(self))
        atomic_write(path, bytes(data))
