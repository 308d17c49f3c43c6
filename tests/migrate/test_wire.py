"""The migrator's AMQP client takes deliveries whole however the reads cut them: a delivery whose
three frames came in one read is handed over in one step, one cut anywhere frame by frame, and both
give the same tags, flags, properties and bodies (empty, one frame, several frames)."""

from __future__ import annotations

import asyncio

from ferrymq.migrate.wire import AMQPURL, Channel, Connection
from ferrymq.protocol.amqp import fast

FRAME_MAX = 4096
PROPERTIES = (b"\x00\x00", b"\x10\x00\x0atext/plain")  # none; a content type
BODIES = (b"one", b"", b"x" * (3 * FRAME_MAX), b"y" * 100)


def _deliveries() -> tuple[bytes, list[tuple[int, bool, bytes, bytes]]]:
    wire, expected = [], []
    for i, body in enumerate(BODIES * 2):
        tag, redelivered, properties = i + 1, i % 3 == 0, PROPERTIES[i % 2]
        wire.append(fast.encode_deliver(1, "ctag", tag, redelivered, "", "q"))
        wire.append(fast.encode_content(1, properties, body, FRAME_MAX))
        expected.append((tag, redelivered, properties, body))
    return b"".join(wire), expected


async def _received(reads: list[bytes]) -> list[tuple[int, bool, bytes, bytes]]:
    connection = Connection(AMQPURL.parse("amqp://guest:guest@127.0.0.1:1/"))
    connection.frame_max = FRAME_MAX
    channel = connection.channels[1] = Channel(connection, 1)
    got: list[tuple[int, bool, bytes, bytes]] = []
    channel.on_deliver = lambda *delivery: got.append(delivery)
    for read in reads:
        connection.data_received(read)
    return got


def test_deliveries_come_whole_however_the_reads_cut_them() -> None:
    wire, expected = _deliveries()
    assert asyncio.run(_received([wire])) == expected
    for cut in range(1, len(wire), 7):
        assert asyncio.run(_received([wire[:cut], wire[cut:]])) == expected, cut
    assert asyncio.run(_received([wire[i : i + 1] for i in range(len(wire))])) == expected
