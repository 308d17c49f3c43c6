"""DLedger's entry layout: field positions, CRCs, blanks, index units, and garbage refused cleanly."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferrymq.ha.dledger import entry as e


def test_the_header_is_dledgers_48_bytes_in_its_field_order():
    raw = e.encode(7, 3, 4096, b"body", channel=5)
    assert len(raw) == 48 + 4 and e.BODY_OFFSET == 48 and e.POS_OFFSET == 24
    magic, size, index, term, pos, channel = struct.unpack_from(">iiqqqi", raw)
    assert (magic, size, index, term, pos, channel) == (1, 52, 7, 3, 4096, 5)
    chain, crc, body_size = struct.unpack_from(">IIi", raw, 36)
    assert crc == zlib.crc32(b"body") and body_size == 4 and raw[48:] == b"body"
    assert chain == e.chain_crc(0, crc)


def test_decode_returns_the_header_and_a_view_of_the_body():
    raw = b"junk" + e.encode(0, 1, 4, b"hello", magic=e.MAGIC_NOOP)
    h, body = e.decode(raw, 4)
    assert (h.magic, h.index, h.term, h.pos, h.size, h.body_size) == (e.MAGIC_NOOP, 0, 1, 4, 53, 5)
    assert isinstance(body, memoryview) and body == b"hello"


def test_chain_crc_links_each_entry_to_the_one_before():
    a = e.decode_header(e.encode(0, 1, 0, b"a"))
    b = e.decode_header(e.encode(1, 1, 49, b"b", prev_chain_crc=a.chain_crc))
    b_after_other = e.decode_header(e.encode(1, 1, 49, b"b", prev_chain_crc=a.chain_crc ^ 1))
    assert b.chain_crc != b_after_other.chain_crc


def test_set_pos_rewrites_the_position_in_place():
    raw = bytearray(e.encode(2, 2, 0, b"x"))
    e.set_pos(raw, 0, 1 << 40)
    assert e.decode_header(raw).pos == 1 << 40


def test_a_flipped_body_bit_fails_verification_unless_verification_is_off():
    raw = bytearray(e.encode(0, 1, 0, b"payload"))
    raw[50] ^= 1
    with pytest.raises(e.EntryError, match="CRC"):
        e.decode(raw)
    assert e.decode(raw, verify=False)[1] == bytes(raw[48:])


def test_blanks_and_index_units():
    blank = e.encode_blank(20)
    assert len(blank) == 20 and e.is_blank(blank) and not e.is_blank(e.encode(0, 1, 0, b""))
    with pytest.raises(e.EntryError):
        e.encode_blank(7)
    with pytest.raises(e.EntryError, match="magic"):
        e.decode(e.encode_blank(100))
    h = e.decode_header(e.encode(9, 4, 1000, b"abc"))
    unit = e.encode_index(h)
    assert len(unit) == 32 and e.decode_index(unit) == (1, 1000, 51, 9, 4)
    with pytest.raises(e.EntryError):
        e.decode_index(unit[:31])


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"", "truncated entry header"),
        (e.encode(0, 1, 0, b"abc")[:47], "truncated entry header"),
        (e.encode(0, 1, 0, b"abc")[:50], "truncated entry at"),
        (struct.pack(">ii", 9, 48) + bytes(40), "bad entry magic"),
        (struct.pack(">iiqqqiIIi", 1, 40, 0, 0, 0, 0, 0, 0, -8), "size"),
        (struct.pack(">iiqqqiIIi", 1, 60, 0, 0, 0, 0, 0, 0, 11), "size"),
        (struct.pack(">iiqqqiIIi", 1, 48, -1, 0, 0, 0, 0, 0, 0), "negative"),
    ],
)
def test_malformed_entries_are_refused_with_a_reason(raw, error):
    with pytest.raises(e.EntryError, match=error):
        e.decode(raw)


def test_encoding_refuses_what_it_cannot_represent():
    with pytest.raises(e.EntryError):
        e.encode(0, 1, 0, b"", magic=7)
    with pytest.raises(e.EntryError):
        e.encode(-1, 1, 0, b"")


@given(st.binary(max_size=200), st.integers(min_value=0, max_value=199))
def test_decoding_garbage_either_works_or_raises_entry_error(raw, offset):
    try:
        h, body = e.decode(raw, offset, verify=False)
    except e.EntryError:
        return
    assert h.size == 48 + len(body) and offset + h.size <= len(raw)


@given(st.integers(0, 2**62), st.integers(0, 2**62), st.integers(0, 2**62), st.binary(max_size=300))
def test_round_trip(index, term, pos, body):
    h, got = e.decode(e.encode(index, term, pos, body))
    assert (h.index, h.term, h.pos, bytes(got)) == (index, term, pos, body)


@given(st.binary(min_size=48, max_size=120), st.integers(0, 119))
def test_bit_flips_in_a_valid_entry_never_pass_as_the_same_entry(noise, where):
    raw = bytearray(e.encode(3, 2, 0, bytes(noise)))
    where %= len(raw)
    raw[where] ^= 0x40
    try:
        h, _ = e.decode(raw)
    except e.EntryError:
        return
    assert (h.index, h.term, h.pos, h.channel, h.chain_crc) != (3, 2, 0, 0, e.chain_crc(0, zlib.crc32(noise)))


def test_a_run_encodes_as_single_entries_would_and_decodes_back_without_copies():
    entries = [e.Entry(4, 1, b"a"), e.Entry(5, 2, b"", e.MAGIC_NOOP), e.Entry(6, 2, b"ccc")]
    parts, positions, chain = e.encode_run(entries, pos=100, prev_chain_crc=7)
    raw = b"".join(parts)
    assert positions == [100, 149, 197] and parts[1] is entries[0].body
    one_by_one = e.encode(4, 1, 100, b"a", prev_chain_crc=7)
    assert raw.startswith(one_by_one)
    got, end = e.decode_run(raw)
    assert got == entries and end == len(raw) and got[2].body.obj is raw
    assert e.decode_header(raw, 97).chain_crc == chain
    assert e.decode_run(raw, 49, 1) == ([entries[1]], 97)
    with pytest.raises(e.EntryError, match="truncated"):
        e.decode_run(raw, 0, 4)
    with pytest.raises(e.EntryError):
        e.encode_run([e.Entry(0, 1, b"", magic=9)])


@given(st.binary(max_size=200), st.integers(-1, 5))
def test_decoding_a_run_of_garbage_either_works_or_raises_entry_error(raw, count):
    try:
        entries, end = e.decode_run(raw, 0, count, verify=False)
    except e.EntryError:
        return
    assert end <= len(raw) and (count < 0 or len(entries) == count)
