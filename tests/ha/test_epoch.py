"""The epoch file: durable entries, damage falls back to the backup, and the consistent-offset rule."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferrymq.store.epoch import EpochEntry, EpochFile, consistent_offset, decode, encode
from ferrymq.store.errors import StoreError

E = EpochEntry


def test_entries_survive_reopen_in_rocketmq_layout(tmp_path):
    path = tmp_path / "epochFileCheckpoint"
    f = EpochFile(path)
    assert f.entries == [] and f.last_epoch == 0
    assert f.append(1, 0)
    assert f.append(3, 1024)
    assert not f.append(3, 2048)  # not newer: ignored
    assert not f.append(2, 4096)
    lines = path.read_text().splitlines()
    assert lines[0] == "2" and lines[2:] == ["1-0", "3-1024"]
    assert EpochFile(path).entries == [E(1, 0), E(3, 1024)]


def test_an_epoch_cannot_start_before_the_previous_one(tmp_path):
    f = EpochFile(tmp_path / "e")
    f.append(1, 100)
    with pytest.raises(StoreError, match="before epoch 1"):
        f.append(2, 50)


def test_damaged_file_falls_back_to_backup(tmp_path):
    path = tmp_path / "e"
    f = EpochFile(path)
    f.append(1, 0)
    f.append(2, 10)
    path.write_text(path.read_text().replace("2-10", "2-11"))  # CRC no longer matches
    assert EpochFile(path).entries == [E(1, 0)]


def test_truncate_from_drops_epochs_starting_at_or_after_the_cut(tmp_path):
    f = EpochFile(tmp_path / "e")
    for epoch, start in ((1, 0), (2, 80), (3, 120)):
        f.append(epoch, start)
    f.truncate_from(80)
    assert EpochFile(tmp_path / "e").entries == [E(1, 0)]
    assert f.entry_at(79) == E(1, 0) and f.entry_at(5000) == E(1, 0)


def test_trim_below_forgets_epochs_retention_deleted_and_keeps_the_newest(tmp_path):
    f = EpochFile(tmp_path / "e")
    for epoch, start in [(1, 0), (2, 100), (3, 200), (5, 300)]:
        f.append(epoch, start)
    f.trim_below(100)  # epoch 1 ends exactly at the new minimum: it stays
    assert f.entries == [E(1, 0), E(2, 100), E(3, 200), E(5, 300)]
    f.trim_below(250)
    assert f.entries == [E(3, 200), E(5, 300)]
    assert EpochFile(tmp_path / "e").entries == f.entries  # durable
    f.trim_below(10_000)  # even past the newest start, the newest stays
    assert f.entries == [E(5, 300)]


def test_consistent_offset():
    # The replica wrote epoch 2 the master never saw: cut back to where epoch 1 ended on the master.
    assert consistent_offset([E(1, 0), E(2, 100)], 150, [E(1, 0), E(3, 80)], 200) == 80
    # Same history, replica behind: nothing to cut.
    assert consistent_offset([E(1, 0), E(3, 80)], 90, [E(1, 0), E(3, 80)], 200) == 90
    # Replica ahead within the same epoch (an old master): cut to the master's end.
    assert consistent_offset([E(1, 0)], 500, [E(1, 0)], 300) == 300
    # No common epoch at the same start: no consistent point.
    assert consistent_offset([E(2, 10)], 50, [E(1, 0), E(3, 10)], 60) == -1


@given(st.binary(max_size=200))
def test_decoder_rejects_garbage_with_value_error(data):
    try:
        entries = decode(data)
    except ValueError:  # UnicodeDecodeError is one
        return
    assert all(b.epoch > a.epoch for a, b in pairwise(entries))


@given(st.lists(st.tuples(st.integers(0, 2**31), st.integers(0, 2**62)), max_size=20))
def test_round_trip(pairs):
    entries, epoch, start = [], 0, 0
    for de, ds in pairs:
        epoch, start = epoch + 1 + de % 5, start + ds % 10**9
        entries.append(E(epoch, start))
    assert decode(encode(entries)) == entries
