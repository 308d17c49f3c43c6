"""The replica's receiver, fed by hand exactly as a transport calls a BufferedProtocol: every way a
network can cut the master's stream (a header split anywhere, several frames in one read, a body
over many reads) must append the same bytes."""

from __future__ import annotations

import asyncio
import random

import pytest

from ferrymq.ha.client import _Receiver
from ferrymq.ha.wire import master_handshake, transfer_header
from tests.ha.conftest import commitlog_bytes, eventually


class _Transport:
    """asyncio's transport interface, as far as the receiver uses it: what it writes is kept."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True


def _feed(receiver: _Receiver, data: bytes, rng: random.Random, most: int) -> None:
    """Hand `data` over in reads of random sizes, each into the buffer the receiver offers."""
    pos = 0
    while pos < len(data) and not receiver.transport.is_closing():  # an aborted transport reads no more
        buffer = receiver.get_buffer(-1)
        n = min(rng.randint(1, most), len(buffer), len(data) - pos)
        buffer[:n] = data[pos : pos + n]
        receiver.buffer_updated(n)
        pos += n


def _stream(master, rng: random.Random) -> bytes:
    """The master's CommitLog as transfer frames: small ones (several per read) and large ones."""
    store, entry = master.store, master.epochs.entries[0]
    out, offset = bytearray(), store.commitlog.min_offset
    while offset < store.commitlog.max_offset:
        chunk = store.read_commitlog(
            offset, rng.randint(1, 300) if rng.random() < 0.9 else rng.randint(1, 50_000)
        )
        out += transfer_header(offset, len(chunk), entry.epoch, entry.start_offset, offset) + chunk
        offset += len(chunk)
    return bytes(out)


@pytest.fixture
async def pair(group):
    """A master with data (its own group) and a slave whose HA client has no master to reach."""
    master = await group.start("m", broker_name="source")
    rng = random.Random(3)
    for i in range(150):
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9000)))
        await group.send(master, body, queue_id=i % 2)
    slave = await group.start("s", broker_role="SLAVE", broker_id=1, ha_master_address="127.0.0.1:9")
    return master, slave


@pytest.mark.parametrize("seed", range(6))
async def test_every_cut_of_the_stream_appends_the_same_bytes(pair, seed):
    master, slave = pair
    rng = random.Random(seed)
    receiver, transport = _Receiver(slave.ha_client), _Transport()
    receiver.connection_made(transport)
    _feed(receiver, master_handshake(0, master.epochs.entries), rng, 7)
    assert receiver.hello.done() and receiver.hello.result().last_epoch == 1
    receiver.start_streaming()
    _feed(receiver, _stream(master, rng), rng, rng.choice([50, 700, 5000, 100_000]))
    assert commitlog_bytes(slave) == commitlog_bytes(master)
    await eventually(
        lambda: transport.written[-1][4:] == master.store.commitlog.max_offset.to_bytes(8, "big")
    )
    await asyncio.to_thread(slave.store.wait_dispatched)
    assert [slave.store.get_max_offset("T", q) for q in range(2)] == [75, 75]
    assert not transport.aborted


async def test_a_transfer_for_the_wrong_offset_ends_the_session(pair):
    master, slave = pair
    receiver, transport = _Receiver(slave.ha_client), _Transport()
    receiver.connection_made(transport)
    _feed(receiver, master_handshake(0, master.epochs.entries), random.Random(0), 100)
    receiver.start_streaming()
    _feed(receiver, transfer_header(500, 10, 1, 0, 0) + bytes(10), random.Random(0), 100)
    assert transport.aborted
    with pytest.raises(Exception, match="master sent offset 500, replica is at 0"):
        receiver.closed.result()
    assert slave.store.commitlog.max_offset == 0
