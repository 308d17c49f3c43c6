"""The C accelerators of the store (ferrymq/_native/scan.c, index.c) against their Python references.

Both must give identical answers on well-formed segments of every shape (IPv6 hosts, long and
non-ASCII topics, tags and keys, transaction types, blanks, torn tails) and on garbage, where
neither may raise.
"""

from __future__ import annotations

import importlib
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.protocol.hashes import tag_hash
from ferrymq.protocol.record import topic_block, write_blank, write_record
from ferrymq.protocol.sys_flag import (
    BORNHOST_V6_FLAG,
    STOREHOST_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from ferrymq.store.dispatch import SCAN_BLANK, SCAN_INVALID, dispatch_scan
from ferrymq.store.index import HEADER_SIZE, put_index_entries
from ferrymq.store.indexer import index_scan

# Built at install; a missing build fails here rather than skipping.
scan = importlib.import_module("ferrymq._native.scan")
index_c = importlib.import_module("ferrymq._native.index")

_BOTH_V6 = BORNHOST_V6_FLAG | STOREHOST_V6_FLAG
BASE = 5 << 30  # the segment's CommitLog offset: physical offsets are relative to it

texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), max_size=12)
ascii_words = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=8)
records = st.lists(
    st.fixed_dictionaries(
        {
            "topic": st.one_of(
                st.sampled_from(["T", "Orders", "订单"]), st.text("ab", min_size=120, max_size=140)
            ),
            "queue_id": st.integers(0, 3),
            "tran": st.sampled_from(
                [0, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE]
            ),
            "v6": st.sampled_from(
                [0, BORNHOST_V6_FLAG, STOREHOST_V6_FLAG, BORNHOST_V6_FLAG | STOREHOST_V6_FLAG]
            ),
            "tag": st.one_of(st.none(), texts),
            "keys": st.lists(st.one_of(ascii_words, texts), max_size=3),
            "uniq": st.one_of(st.none(), ascii_words),
            "body": st.binary(max_size=40),
            "gap": st.booleans(),
        }
    ),
    max_size=12,
)


def _segment(recs: list[dict], blank: bool) -> tuple[bytearray, list[int], int]:
    """Records written back to back (queue offsets per queue, gaps where asked), then maybe a blank."""
    buf = bytearray(1 << 16)
    pos, starts, next_offset = 0, [], {}
    for r in recs:
        props = ""
        if r["tag"] is not None:
            props += f"TAGS\x01{r['tag']}\x02"
        if r["keys"]:
            props += "KEYS\x01" + " ".join(r["keys"]) + "\x02"
        if r["uniq"] is not None:
            props += f"UNIQ_KEY\x01{r['uniq']}\x02"
        key = (r["topic"], r["queue_id"])
        queue_offset = next_offset.get(key, 0) + (5 if r["gap"] else 0)
        next_offset[key] = queue_offset + 1
        born = b"\0" * 20 if r["v6"] & BORNHOST_V6_FLAG else b"\0" * 8
        store = b"\0" * 20 if r["v6"] & STOREHOST_V6_FLAG else b"\0" * 8
        starts.append(pos)
        pos += write_record(
            buf, pos, topic_block(r["topic"].encode()), r["queue_id"], 0, queue_offset, BASE + pos,
            r["tran"] | r["v6"], 1, born, 1000 + pos, store, 0, 0, r["body"], props.encode(),
        )  # fmt: skip
    if blank:
        write_blank(buf, pos, len(buf) - pos)
    return buf, starts, pos


@settings(max_examples=300, deadline=None)
@given(records, st.booleans(), st.integers(0, 1 << 16), st.integers(0, 1 << 16), st.integers(0, 12))
def test_scans_agree_on_well_formed_segments(recs, blank, cut, stop, first):
    buf, starts, _ = _segment(recs, blank)
    pos = starts[first] if first < len(starts) else 0
    end = min(cut, len(buf))
    for verify in (False, True):
        args = (bytes(buf), pos, end, stop, BASE, verify, tag_hash)
        assert scan.dispatch_scan(*args) == dispatch_scan(*args)
    assert scan.index_scan(bytes(buf), pos, end, BASE) == index_scan(bytes(buf), pos, end, BASE)


@settings(max_examples=200, deadline=None)
@given(records.filter(bool))
def test_whole_segment_gives_every_entry_and_key(recs):
    buf, starts, _ = _segment(recs, blank=True)
    _, status, count, _, runs = scan.dispatch_scan(bytes(buf), 0, len(buf), len(buf), BASE, True, tag_hash)
    assert (status, count) == (SCAN_BLANK, len(recs))
    visible = [r for r in recs if r["tran"] not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)]
    assert sum(len(entries) // 20 for *_, entries in runs) == len(visible)
    _, _, items = scan.index_scan(bytes(buf), 0, len(buf), BASE)
    hashes = {h for h, _, _ in items}
    for r, start in zip(recs, starts, strict=True):
        if r["tran"] != TRANSACTION_ROLLBACK_TYPE and r["uniq"]:
            assert zlib.crc32(f"{r['topic']}#{r['uniq']}".encode()) & 0x7FFFFFFF in hashes
            assert any(phys == BASE + start for _, phys, _ in items)


def test_a_corrupt_body_is_invalid_only_when_crcs_are_checked():
    buf, _, end = _segment([{"topic": "T", "queue_id": 0, "tran": 0, "v6": 0, "tag": "a", "keys": [],
                             "uniq": None, "body": b"payload", "gap": False}], blank=False)  # fmt: skip
    buf[buf.index(b"payload")] ^= 0xFF
    for verify, status in ((False, 0), (True, SCAN_INVALID)):
        assert scan.dispatch_scan(bytes(buf), 0, end, end, BASE, verify, tag_hash)[1] == status


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 400), st.integers(0, 400))
def test_garbage_never_raises_and_agrees(data, pos, end):
    pos, end = min(pos, len(data)), min(end, len(data))
    args = (data, pos, end, end, 0, True, tag_hash)
    assert scan.dispatch_scan(*args) == dispatch_scan(*args)
    assert scan.index_scan(data, pos, end, 0) == index_scan(data, pos, end, 0)


def test_crc32_is_zlibs():
    for data in (b"", b"a", b"topic#key", bytes(range(256)) * 3):
        assert scan.crc32(data) == zlib.crc32(data)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 0x7FFFFFFF), st.integers(0, 1 << 40), st.integers(0, 1 << 42)), max_size=60
    ),
    st.integers(1, 7),
    st.integers(1, 20),
)
def test_index_put_agrees(items, slot_num, count):
    """Same bytes and header fields, chains through shared slots and clamped times included."""
    max_entries = count + len(items)
    entries_pos = HEADER_SIZE + slot_num * 4
    files = [bytearray(entries_pos + max_entries * 20) for _ in range(2)]
    for f in files:  # slots from an earlier life: some inside the count, some past it
        for slot in range(slot_num):
            f[HEADER_SIZE + slot * 4 : HEADER_SIZE + slot * 4 + 4] = (slot * 3).to_bytes(4, "big")
    args = (slot_num, entries_pos, count, 1 << 41, 0, 0, 0)
    assert index_c.put(files[0], items, *args) == put_index_entries(files[1], items, *args)
    assert files[0] == files[1]


def test_index_put_refuses_what_does_not_fit():
    with pytest.raises(ValueError):
        index_c.put(bytearray(HEADER_SIZE + 4 + 20), [(1, 2, 3)] * 2, 1, HEADER_SIZE + 4, 1, 0, 0, 0, 0)
