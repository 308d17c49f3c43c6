"""The HA frame codecs: round trips, frames split anywhere, and garbage raising only HAFrameError."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ferrymq.ha.wire import (
    Ack,
    HAFrameError,
    MasterHandshake,
    MasterStreamDecoder,
    ReplicaHandshake,
    ReplicaStreamDecoder,
    Transfer,
    ack,
    master_handshake,
    replica_handshake,
    transfer_header,
)
from ferrymq.protocol.errors import ProtocolError
from ferrymq.store.epoch import EpochEntry


def feed_in_pieces(decoder, data: bytes, cuts: list[int]) -> list:
    frames, last = [], 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        frames += decoder.feed(data[last:cut])
        last = cut
    return frames


@given(st.lists(st.integers(0, 10_000), max_size=8))
def test_master_stream_round_trip_split_anywhere(cuts):
    epochs = [EpochEntry(1, 0), EpochEntry(4, 1000)]
    body = bytes(range(200))
    data = master_handshake(5000, epochs) + transfer_header(1000, len(body), 4, 1000, 900) + body
    data += transfer_header(1200, 0, 4, 1000, 1200)
    frames = feed_in_pieces(MasterStreamDecoder(), data, cuts)
    assert frames == [
        MasterHandshake(5000, 4, epochs),
        Transfer(1000, 4, 1000, 900, body),
        Transfer(1200, 4, 1000, 1200, b""),
    ]


@given(st.lists(st.integers(0, 100), max_size=5))
def test_replica_stream_round_trip_split_anywhere(cuts):
    data = replica_handshake(ReplicaHandshake(7)) + ack(0) + ack(123456789)
    frames = feed_in_pieces(ReplicaStreamDecoder(), data, cuts)
    assert frames == [ReplicaHandshake(7), Ack(0), Ack(123456789)]


@given(st.binary(max_size=300), st.booleans())
def test_garbage_raises_only_protocol_errors(data, from_master):
    decoder = MasterStreamDecoder() if from_master else ReplicaStreamDecoder()
    try:
        decoder.feed(data)
    except HAFrameError as e:
        assert isinstance(e, ProtocolError)


def test_specific_malformations_are_named():
    cases = [
        (ReplicaStreamDecoder(), ack(5), "expected a replica handshake"),
        (MasterStreamDecoder(), b"\x00\x00\x00\x09" + bytes(40), "unknown HA frame state 9"),
        (MasterStreamDecoder(), transfer_header(0, 1 << 30, 1, 0, 0), "transfer frame body"),
        (
            MasterStreamDecoder(),
            master_handshake(0, [EpochEntry(3, 0), EpochEntry(2, 5)]),
            "inconsistent epoch",
        ),
        (MasterStreamDecoder(), transfer_header(10, 0, 1, 20, 0), "starting later"),
    ]
    for decoder, data, message in cases:
        try:
            decoder.feed(data)
        except HAFrameError as e:
            assert message in str(e)
        else:
            raise AssertionError(f"accepted {data!r}")
