"""The store's append in C (ferrymq/_native/put.c) against its Python reference, py_append (with the
ConsumeQueue tag hash given, or found from TAGS)."""

from __future__ import annotations

import importlib
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.protocol.record import pack_host, record_size, topic_block
from ferrymq.store.dispatch import Prepared
from ferrymq.store.message_store import py_append

native = importlib.import_module("ferrymq._native.put")  # built at install; a missing build fails here

ints = st.integers(-(2**31), 2**31 - 1)
longs = st.integers(-(2**63), 2**63 - 1)
hosts = st.sampled_from([pack_host("127.0.0.1", 10911), pack_host("::1", 8080)])
# properties with a TAGS value (ASCII, any text, bytes that are no UTF-8) where the hash is left to append
tagged = st.builds(
    lambda before, tag, after: before + b"TAGS\x01" + tag + after,
    st.sampled_from([b"", b"KEYS\x01k\x02", b"XTAGS\x01no\x02"]),
    st.one_of(st.text(max_size=12).map(str.encode), st.binary(max_size=12)),
    st.sampled_from([b"", b"\x02WAIT\x01true"]),
)


@settings(max_examples=300)
@given(
    pos=st.integers(0, 40), base=st.integers(0, 2**62), queue_id=st.integers(0, 7), sys_flag=ints,
    born=st.sampled_from([0, 1700000000000]), born_host=hosts, reconsume=ints, body=st.binary(max_size=200),
    props=st.one_of(st.binary(max_size=40), tagged),
    known=st.dictionaries(st.tuples(st.just("T"), st.integers(0, 7)), longs),
    takes_offset=st.booleans(), tags_code=st.one_of(st.none(), longs),
)  # fmt: skip
def test_append_stores_and_prepares_what_the_python_one_does(
    pos, base, queue_id, sys_flag, born, born_host, reconsume, body, props, known, takes_offset, tags_code
):  # fmt: skip
    if takes_offset and known.get(("T", queue_id), 0) == 2**63 - 1:
        known[("T", queue_id)] = 5  # the last queue offset a Long holds has no successor
    key = ("T", queue_id) if takes_offset else None
    store_host = pack_host("10.0.0.1", 10911)
    size = record_size(len(body), 1, len(props), len(born_host))
    outcomes = []
    for append in (native.append, py_append):
        buf, offsets, prepared = bytearray(pos + size), dict(known), deque[Prepared]()
        queue_offset = append(
            buf, pos, base, topic_block(b"T"), queue_id, 0, sys_flag, born, born_host, 1700000000123,
            store_host, reconsume, 0, body, props, offsets, key, tags_code, prepared, Prepared, "T",
        )  # fmt: skip
        assert all(type(p) is Prepared for p in prepared)
        outcomes.append((queue_offset, bytes(buf), offsets, list(prepared)))
    assert outcomes[0] == outcomes[1]
