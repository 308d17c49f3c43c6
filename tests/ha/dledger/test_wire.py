"""Raft messages as frames: round trips, bodies that are never copied, and bad frames refused."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferrymq.ha.dledger import wire
from ferrymq.ha.dledger.entry import MAGIC_NOOP
from ferrymq.ha.dledger.log import Entry
from ferrymq.ha.dledger.messages import Append, AppendResponse, TimeoutNow, VoteRequest, VoteResponse
from ferrymq.protocol.errors import ProtocolError

ENTRIES = [Entry(5, 2, b"hello"), Entry(6, 3, b"", MAGIC_NOOP), Entry(7, 3, b"x" * 300)]
MESSAGES = [
    VoteRequest("n0", "n1", 4, 10, 3, pre=True),
    VoteRequest("n0", "n1", 4, -1, 0, transfer=True),
    VoteResponse("n1", "n0", 4, True, pre=True),
    VoteResponse("n1", "n0", 5, False),
    Append("n0", "n2", 3, 4, 2, ENTRIES, 6),
    Append("n0", "n2", 3, -1, 0, [], -1),
    AppendResponse("n2", "n0", 3, True, match_index=7),
    AppendResponse("n2", "n0", 3, False, reject_index=9, conflict_index=4, conflict_term=2),
    AppendResponse("n2", "n0", 3, False, match_index=8, reject_index=9, conflict_index=9, refused=True),
    TimeoutNow("n0", "n1", 8),
]


def frame(m) -> bytes:
    return b"".join(wire.encode(m))


def same(a, b) -> bool:
    if isinstance(a, Append):
        ea = [(e.index, e.term, bytes(e.body), e.magic) for e in a.entries]
        eb = [(e.index, e.term, bytes(e.body), e.magic) for e in b.entries]
        return ea == eb and (a.src, a.dst, a.term, a.prev_index, a.prev_term, a.commit) == (
            b.src,
            b.dst,
            b.term,
            b.prev_index,
            b.prev_term,
            b.commit,
        )
    return a == b


@pytest.mark.parametrize("m", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(m):
    assert same(wire.decode(frame(m)), m)
    assert wire.REQUEST_CODES[type(m)] in (51001, 51004, 51005)


def test_entry_bodies_are_neither_copied_on_encode_nor_on_decode():
    body = b"y" * 1000
    parts = wire.encode(Append("n0", "n1", 1, -1, 0, [Entry(0, 1, body)], -1))
    assert any(p is body for p in parts)
    raw = b"".join(parts)
    (e,) = wire.decode(raw).entries
    assert isinstance(e.body, memoryview) and e.body.obj is raw


@pytest.mark.parametrize("m", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_truncation_of_a_frame_is_refused(m):
    raw = frame(m)
    for n in range(len(raw)):
        with pytest.raises(wire.WireError):
            wire.decode(raw[:n])
    with pytest.raises(wire.WireError, match=r"expected|bytes"):
        wire.decode(raw + b"\x00")


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"\x09" + bytes(8) + b"\x00\x00", "kind"),
        (struct.pack(">Bq", 4, -3) + b"\x00\x00", "negative term"),
        (struct.pack(">Bq", 4, 1) + b"\x05ab", "node id"),
        (struct.pack(">Bq", 4, 1) + b"\x02\xff\xfe\x00", "malformed"),
        (struct.pack(">Bq", 2, 1) + b"\x00\x00" + struct.pack(">qqqi", 0, 1, 0, 10**6), "claims"),
        (struct.pack(">Bq", 2, 1) + b"\x00\x00" + struct.pack(">qqqi", -5, 1, 0, 0), "prev_index -5"),
        (struct.pack(">Bq", 3, 1) + b"\x00\x00" + struct.pack(">Bqqqq", 0, -1, -2, 0, 0), "reject_index"),
    ],
)
def test_bad_frames_are_refused_with_a_reason(raw, error):
    with pytest.raises(wire.WireError, match=error):
        wire.decode(raw)


def test_a_corrupted_entry_body_is_refused():
    raw = bytearray(frame(MESSAGES[4]))
    raw[-1] ^= 1
    with pytest.raises(wire.WireError, match="CRC"):
        wire.decode(raw)


def test_node_ids_longer_than_a_byte_can_count_are_refused():
    with pytest.raises(wire.WireError):
        wire.encode(TimeoutNow("n" * 300, "n1", 1))


@given(st.binary(max_size=300))
def test_garbage_decodes_or_raises_a_wire_error(raw):
    try:
        wire.decode(raw)
    except wire.WireError as e:
        assert isinstance(e, ProtocolError)


@given(
    st.integers(-1, 2**40),
    st.integers(0, 2**40),
    st.lists(st.tuples(st.integers(0, 2**40), st.binary(max_size=64)), max_size=8),
)
def test_appends_round_trip(prev_index, term, raw_entries):
    entries = [Entry(prev_index + 1 + k, t, b) for k, (t, b) in enumerate(raw_entries)]
    m = Append("leader", "follower", term, prev_index, term, entries, prev_index)
    assert same(wire.decode(frame(m)), m)


def test_a_run_sent_to_each_follower_is_encoded_once_and_only_for_the_same_entries(monkeypatch):
    runs = wire.RunCache()
    calls = []
    encode_run = wire.codec.encode_run
    monkeypatch.setattr(wire.codec, "encode_run", lambda es: calls.append(len(es)) or encode_run(es))
    to_n1, to_n2 = (Append("n0", dst, 3, 4, 2, list(ENTRIES), 6) for dst in ("n1", "n2"))
    assert frame(to_n1) == b"".join(wire.encode(to_n1, runs))
    assert frame(to_n2) == b"".join(wire.encode(to_n2, runs))
    assert calls == [3, 3, 3]  # the two without a cache, then one for both followers
    replaced = [ENTRIES[0], ENTRIES[1], Entry(7, 3, b"z" * 300)]  # equal index and term, other bytes
    again = Append("n0", "n1", 3, 4, 2, replaced, 6)
    assert b"".join(wire.encode(again, runs)) == frame(again)
