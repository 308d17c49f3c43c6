"""The HA wire format (RocketMQ's AutoSwitch HA protocol), sans I/O.

Raw TCP on the HA port, big-endian, no remoting frames:

- replica -> master, first: handshake `state=1 i32 · syncFromLastFile i16 · asyncLearner i16 · brokerId i64`
- master -> replica: handshake `state=1 i32 · bodySize i32 · masterMaxOffset i64 · lastEpoch i32`
  + body of (epoch i32, startOffset i64) entries
- master -> replica: transfer `state=2 i32 · bodySize i32 · offset i64 · epoch i32 · epochStartOffset i64 ·
  confirmOffset i64` + CommitLog bytes (an empty body is a heartbeat)
- replica -> master, after the handshake: ack `state=2 i32 · maxOffset i64` (the replica reports its
  CommitLog max offset as 8 bytes, as in classic HA, behind the state word)

The decoders take bytes as they arrive and return whole frames; anything malformed raises
HAFrameError, a ProtocolError, so a connection fed garbage is closed cleanly.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from ferrymq.protocol.errors import ProtocolError
from ferrymq.store.epoch import EpochEntry, well_ordered

HANDSHAKE, TRANSFER = 1, 2
MAX_EPOCH_ENTRIES = 100_000
MAX_TRANSFER_BODY = 16 << 20

_REPLICA_HANDSHAKE = struct.Struct(">ihhq")
_MASTER_HANDSHAKE = struct.Struct(">iiqi")
_EPOCH = struct.Struct(">iq")
_TRANSFER = struct.Struct(">iiqiqq")
_ACK = struct.Struct(">iq")
_STATE = struct.Struct(">i")


class HAFrameError(ProtocolError):
    """Bytes on the HA port that are not a frame of the HA protocol."""


@dataclass(frozen=True)
class ReplicaHandshake:
    broker_id: int
    sync_from_last_file: bool = False
    async_learner: bool = False


@dataclass(frozen=True)
class MasterHandshake:
    max_offset: int
    last_epoch: int
    epochs: list[EpochEntry]


@dataclass(frozen=True)
class Transfer:
    offset: int
    epoch: int
    epoch_start: int
    confirm_offset: int
    body: bytes


@dataclass(frozen=True)
class Ack:
    max_offset: int


def replica_handshake(h: ReplicaHandshake) -> bytes:
    return _REPLICA_HANDSHAKE.pack(HANDSHAKE, int(h.sync_from_last_file), int(h.async_learner), h.broker_id)


def master_handshake(max_offset: int, epochs: list[EpochEntry]) -> bytes:
    last = epochs[-1].epoch if epochs else 0
    body = b"".join(_EPOCH.pack(e.epoch, e.start_offset) for e in epochs)
    return _MASTER_HANDSHAKE.pack(HANDSHAKE, len(body), max_offset, last) + body


def transfer_header(offset: int, size: int, epoch: int, epoch_start: int, confirm_offset: int) -> bytes:
    """The header of a transfer frame; the `size` CommitLog bytes follow it unframed (no copy)."""
    return _TRANSFER.pack(TRANSFER, size, offset, epoch, epoch_start, confirm_offset)


def ack(max_offset: int) -> bytes:
    return _ACK.pack(TRANSFER, max_offset)


class _Decoder:
    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | memoryview) -> list:
        """Append `data`; return the frames it completes (HAFrameError if the stream is not HA)."""
        buf = self._buf
        buf += data
        frames, pos = [], 0
        while True:
            frame, used = self._frame(buf, pos)
            if frame is None:
                break
            frames.append(frame)
            pos += used
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        """Bytes fed that no whole frame used yet."""
        return len(self._buf)

    def _frame(self, buf: bytearray, pos: int):
        raise NotImplementedError


def _check_offset(name: str, value: int) -> None:
    if value < 0:
        raise HAFrameError(f"HA frame has a negative {name}: {value}")


class ReplicaStreamDecoder(_Decoder):
    """What a master reads from a replica: one handshake, then acks."""

    def __init__(self) -> None:
        super().__init__()
        self.handshaken = False

    def _frame(self, buf: bytearray, pos: int):
        if len(buf) - pos < 4:
            return None, 0
        state = _STATE.unpack_from(buf, pos)[0]
        if not self.handshaken:
            if state != HANDSHAKE:
                raise HAFrameError(f"expected a replica handshake (state 1), got state {state}")
            if len(buf) - pos < _REPLICA_HANDSHAKE.size:
                return None, 0
            _, last_file, learner, broker_id = _REPLICA_HANDSHAKE.unpack_from(buf, pos)
            if last_file not in (0, 1) or learner not in (0, 1):
                raise HAFrameError(f"replica handshake has bad flags {last_file}, {learner}")
            _check_offset("broker id", broker_id)
            self.handshaken = True
            return ReplicaHandshake(broker_id, bool(last_file), bool(learner)), _REPLICA_HANDSHAKE.size
        if state != TRANSFER:
            raise HAFrameError(f"expected a replica ack (state 2), got state {state}")
        if len(buf) - pos < _ACK.size:
            return None, 0
        offset = _ACK.unpack_from(buf, pos)[1]
        _check_offset("ack offset", offset)
        return Ack(offset), _ACK.size


class MasterStreamDecoder(_Decoder):
    """What a replica reads from its master: a handshake, then transfer frames."""

    def _frame(self, buf: bytearray, pos: int):
        if len(buf) - pos < 4:
            return None, 0
        state = _STATE.unpack_from(buf, pos)[0]
        if state == HANDSHAKE:
            if len(buf) - pos < _MASTER_HANDSHAKE.size:
                return None, 0
            _, size, max_offset, last_epoch = _MASTER_HANDSHAKE.unpack_from(buf, pos)
            if size < 0 or size % _EPOCH.size or size > MAX_EPOCH_ENTRIES * _EPOCH.size:
                raise HAFrameError(f"master handshake has a bad epoch list size {size}")
            _check_offset("max offset", max_offset)
            end = pos + _MASTER_HANDSHAKE.size + size
            if len(buf) < end:
                return None, 0
            epochs = [EpochEntry(*e) for e in _EPOCH.iter_unpack(buf[end - size : end])]
            if not well_ordered(epochs):
                raise HAFrameError("master handshake has an inconsistent epoch list")
            if (epochs[-1].epoch if epochs else 0) != last_epoch:
                raise HAFrameError(f"master handshake's last epoch {last_epoch} is not its list's")
            return MasterHandshake(max_offset, last_epoch, epochs), end - pos
        if state != TRANSFER:
            raise HAFrameError(f"unknown HA frame state {state}")
        if len(buf) - pos < _TRANSFER.size:
            return None, 0
        header = read_transfer_header(buf, pos)
        end = pos + _TRANSFER.size + header.size
        if len(buf) < end:
            return None, 0
        return Transfer(*header[1:], bytes(buf[end - header.size : end])), end - pos


class TransferHeader(NamedTuple):
    size: int  # of the CommitLog bytes that follow
    offset: int
    epoch: int
    epoch_start: int
    confirm_offset: int


TRANSFER_HEADER_SIZE = _TRANSFER.size


def read_transfer_header(buf, pos: int) -> TransferHeader:
    """The transfer header in the TRANSFER_HEADER_SIZE bytes at `pos`, checked (HAFrameError)."""
    state, size, offset, epoch, epoch_start, confirm = _TRANSFER.unpack_from(buf, pos)
    if state != TRANSFER:
        raise HAFrameError(f"expected a transfer frame (state 2), got state {state}")
    if not 0 <= size <= MAX_TRANSFER_BODY:
        raise HAFrameError(f"transfer frame body of {size} bytes (limit {MAX_TRANSFER_BODY})")
    for name, value in (("offset", offset), ("epoch", epoch), ("epoch start", epoch_start)):
        _check_offset(name, value)
    if epoch_start > offset:
        raise HAFrameError(f"transfer at {offset} of epoch {epoch} starting later, at {epoch_start}")
    return TransferHeader(size, offset, epoch, epoch_start, confirm)
