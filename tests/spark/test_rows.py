"""The C scan of pull answers (ferrymq._native.rows) against the pure-Python decoder it mirrors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.protocol.errors import MessageDecodeError
from ferrymq.protocol.message_ext import MessageExt
from ferrymq.protocol.sys_flag import COMPRESSED_FLAG
from ferrymq.spark import rows

pytestmark = pytest.mark.skipif(rows._c is None, reason="ferrymq._native.rows is not built")

# Separators, spaces and non-ASCII among the characters, so that odd properties come up.
TEXT = st.text(st.sampled_from("ab \t\x01\x02\x1cé"), max_size=6)
HOSTS = st.sampled_from([("127.0.0.1", 10911), ("::1", 10911), ("10.1.2.3", 1)])


@st.composite
def records(draw) -> bytes:
    props = draw(st.dictionaries(st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "a"]) | TEXT, TEXT, max_size=4))
    return MessageExt(
        topic=draw(st.sampled_from(["T", "Tö", "x" * 200])),
        body=draw(st.binary(max_size=40)),
        properties=props,
        queue_id=draw(st.integers(0, 2**31 - 1)),
        queue_offset=draw(st.integers(0, 2**62)),
        commitlog_offset=draw(st.integers(0, 2**62)),
        sys_flag=draw(st.sampled_from([0, 0, 0x8, COMPRESSED_FLAG])),
        born_timestamp=draw(st.integers(0, 2**50)),
        born_host=draw(HOSTS),
        store_timestamp=draw(st.integers(0, 2**50)),
        store_host=draw(HOSTS),
        reconsume_times=draw(st.integers(0, 16)),
    ).encode()


def python_batch(answers: list[bytes]):
    return rows._python_batch(answers, "broker-a")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(records(), max_size=4).map(b"".join), max_size=3))
def test_c_scan_matches_python(answers):
    scanned = rows._c.scan(answers)
    if scanned is None:  # the Python path's case: compressed, non-ASCII, a repeated key
        return
    batch = rows._scanned_batch(scanned, "broker-a")
    batch.validate(full=True)
    assert batch.equals(python_batch(answers))


def test_c_scan_takes_the_common_case():
    props = {"KEYS": " k1  k2 ", "TAGS": "t"}
    answer = b"".join(
        MessageExt(topic="T", body=b"x" * 10, properties={"UNIQ_KEY": f"id{i}", **props}).encode()
        for i in range(3)
    )
    scanned = rows._c.scan([answer, answer])
    assert scanned is not None and scanned[0] == 6
    batch = rows._scanned_batch(scanned, "b")
    assert batch.column("keys").to_pylist()[0] == ["k1", "k2"]
    assert batch.equals(rows._python_batch([answer, answer], "b"))


@settings(max_examples=500, deadline=None)
@given(st.lists(records(), min_size=1, max_size=3).map(b"".join), st.data())
def test_damaged_answers_are_refused_never_misread(answer, data):
    """Cut or overwritten bytes: the C scan hands them to the Python path, which decodes or refuses."""
    cut = data.draw(st.integers(0, len(answer)))
    at = data.draw(st.integers(0, len(answer) - 1))
    junk = data.draw(st.binary(min_size=1, max_size=8))
    for damaged in (answer[:cut], answer[:at] + junk + answer[at + len(junk) :], junk):
        scanned = rows._c.scan([damaged])
        try:
            expected = python_batch([damaged])
        except MessageDecodeError:
            assert scanned is None
            with pytest.raises(MessageDecodeError):
                rows.records_to_batch([damaged], "broker-a")
            continue
        if scanned is not None:
            assert rows._scanned_batch(scanned, "broker-a").equals(expected)


def test_scan_rejects_what_is_not_a_buffer():
    with pytest.raises(TypeError):
        rows._c.scan([1])
