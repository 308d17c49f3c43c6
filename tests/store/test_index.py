"""IndexFile: key lookup, time ranges, collisions, roll-over, reload, retention and the on-disk layout."""

import errno
import os
import struct
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ferrymq.store.index as index_module
from ferrymq.store.errors import DiskFullError, StoreError
from ferrymq.store.files import MappedFile
from ferrymq.store.index import (
    ENTRY,
    ENTRY_SIZE,
    HEADER,
    HEADER_SIZE,
    SLOT,
    SLOT_SIZE,
    IndexService,
    key_hash,
)

SLOTS = 64
ENTRIES = 100
T0 = 1_700_000_000_000  # a store timestamp in ms
ALL_TIME = (0, 2**62)


def service(directory: Path, *, slots: int = SLOTS, entries: int = ENTRIES) -> IndexService:
    return IndexService(directory, max_hash_slot_num=slots, max_index_num=entries)


def file_names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def header(path: Path) -> tuple[int, ...]:
    return HEADER.unpack_from(path.read_bytes(), 0)


# -- the hash --------------------------------------------------------------------------------------


@given(st.text())
def test_key_hash_is_a_stable_non_negative_int32(text):
    h = key_hash(text)
    assert 0 <= h <= 0x7FFFFFFF
    assert h == zlib.crc32(text.encode(errors="surrogatepass")) & 0x7FFFFFFF  # stable across processes


# -- put and query ---------------------------------------------------------------------------------

puts_strategy = st.lists(
    st.tuples(
        st.sampled_from(["TopicA", "TopicB"]),
        st.lists(st.sampled_from(["", "k1", "k2", "k3", "order-7", "Aa", "BB", "é"]), max_size=3),
        st.integers(0, 2**40),
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(puts=puts_strategy, max_num=st.integers(1, 80))
def test_query_matches_a_dict_model_across_files_and_reload(puts, max_num):
    model: dict[int, list[int]] = {}  # key hash -> offsets in put order
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        index = service(directory, slots=8, entries=12)  # small enough to collide and roll over
        for n, (topic, keys, offset) in enumerate(puts):
            index.put(topic, keys, offset, T0 + n * 10)
            for key in keys:
                if key:
                    model.setdefault(key_hash(f"{topic}#{key}"), []).append(offset)
        for reopened in (False, True):
            if reopened:
                index.close()
                index = service(directory, slots=8, entries=12)
            for topic in ("TopicA", "TopicB"):
                for key in ("k1", "k2", "k3", "order-7", "Aa", "BB", "é", "never-put"):
                    newest_first = list(dict.fromkeys(reversed(model.get(key_hash(f"{topic}#{key}"), []))))
                    assert index.query(topic, key, max_num, *ALL_TIME) == newest_first[:max_num]
        index.close()


def test_time_range_filtering():
    with tempfile.TemporaryDirectory() as tmp:
        index = service(Path(tmp))
        times = [T0, T0 + 10_500, T0 + 20_500, T0 + 30_500]
        for n, ts in enumerate(times):
            index.put("T", ["key"], 100 * n, ts)
        assert index.query("T", "key", 10, T0 + 10_000, T0 + 21_000) == [200, 100]
        assert index.query("T", "key", 10, times[2], times[2]) == [200]  # exactly its store time
        assert index.query("T", "key", 10, T0 + 12_000, T0 + 19_000) == []
        assert index.query("T", "key", 10, T0 - 5_000, T0 - 1) == []  # before the file's range
        assert index.query("T", "key", 10, T0 + 40_000, T0 + 50_000) == []  # after it
        assert index.query("T", "key", 10, *ALL_TIME) == [300, 200, 100, 0]
        index.close()


def test_a_clock_stepping_back_does_not_hide_earlier_entries():
    with tempfile.TemporaryDirectory() as tmp:
        index = service(Path(tmp))
        index.put("T", ["key"], 1, T0 + 10_000)
        index.put("T", ["key"], 2, T0)
        # 2's time is clamped to the file's beginTimestamp, so it comes back as a candidate too.
        assert index.query("T", "key", 10, T0 + 9_000, T0 + 11_000) == [2, 1]
        index.close()


def test_max_num_limits_the_answer():
    with tempfile.TemporaryDirectory() as tmp:
        index = service(Path(tmp))
        for n in range(10):
            index.put("T", ["key"], n, T0 + n)
        assert index.query("T", "key", 3, *ALL_TIME) == [9, 8, 7]
        assert index.query("T", "key", 0, *ALL_TIME) == []
        index.close()


def test_same_slot_other_hash_is_filtered_but_equal_hashes_are_candidates():
    assert key_hash("T#k3985819") == key_hash("T#k4420602")  # a CRC32 collision, found by search
    with tempfile.TemporaryDirectory() as tmp:
        index = service(Path(tmp), slots=1)  # every key shares the one slot
        index.put("T", ["k3985819"], 10, T0)
        index.put("T", ["other"], 20, T0)
        index.put("T", ["k4420602"], 30, T0)
        assert index.query("T", "k3985819", 10, *ALL_TIME) == [30, 10]
        assert index.query("T", "other", 10, *ALL_TIME) == [20]
        assert index.query("U", "other", 10, *ALL_TIME) == []  # the topic is part of the key
        index.close()


def test_rolls_over_to_new_files_and_queries_span_them():
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        index = service(directory, entries=5)  # entry 0 is unused: four keys per file
        for n in range(10):
            index.put("T", ["key", f"k{n}"], n * 100, T0 + n * 1000)
        names = file_names(directory)
        assert len(names) == 5
        assert all(len(name) == 17 and name.isdigit() for name in names)
        assert index.query("T", "key", 100, *ALL_TIME) == [n * 100 for n in reversed(range(10))]
        assert index.query("T", "k3", 100, *ALL_TIME) == [300]
        assert index.query("T", "key", 100, T0 + 2000, T0 + 5000) == [500, 400, 300, 200]
        assert [header(directory / name)[5] for name in names] == [5, 5, 5, 5, 5]
        index.close()


def test_keys_of_one_message_may_straddle_two_files():
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        index = service(directory, entries=4)  # three keys per file
        index.put("T", ["a", "b"], 1, T0)
        index.put("T", ["c", "d", "e"], 2, T0 + 1)
        assert len(file_names(directory)) == 2
        assert [index.query("T", key, 10, *ALL_TIME) for key in "abcde"] == [[1], [1], [2], [2], [2]]
        index.close()


def test_duplicates_are_returned_once():
    with tempfile.TemporaryDirectory() as tmp:
        index = service(Path(tmp), entries=3)
        index.put("T", ["key"], 7, T0)
        index.put("T", ["key"], 8, T0 + 1)
        index.put("T", ["key"], 7, T0 + 2)  # recovery re-indexing a message, in a new file
        index.put("T", ["key"], 7, T0 + 3)
        assert index.query("T", "key", 10, *ALL_TIME) == [7, 8]
        index.close()


def test_empty_keys_are_ignored():
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        index = service(directory)
        index.put("T", [], 1, T0)
        assert file_names(directory) == []
        index.put("T", ["", "key", ""], 2, T0)
        index.close()
        (name,) = file_names(directory)
        assert header(directory / name)[5] == 2  # indexCount starts at 1: one entry
        assert service(directory).query("T", "", 10, *ALL_TIME) == []


# -- files -----------------------------------------------------------------------------------------


def test_on_disk_layout_is_rocketmq_indexfile():
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        index = service(directory)
        index.put("T", ["a", "b"], 1000, T0)
        index.put("T", ["a"], 2000, T0 + 4_999)
        index.close()
        (name,) = file_names(directory)
        data = (directory / name).read_bytes()
        assert len(data) == HEADER_SIZE + SLOTS * SLOT_SIZE + ENTRIES * ENTRY_SIZE
        assert HEADER.unpack_from(data, 0) == (T0, T0 + 4_999, 1000, 2000, 2, 4)
        hash_a, hash_b = key_hash("T#a"), key_hash("T#b")

        def slot(hash_):
            return SLOT.unpack_from(data, HEADER_SIZE + hash_ % SLOTS * SLOT_SIZE)[0]

        def entry(number):
            return ENTRY.unpack_from(data, HEADER_SIZE + SLOTS * SLOT_SIZE + number * ENTRY_SIZE)

        assert (slot(hash_a), slot(hash_b)) == (3, 2)
        assert entry(1) == (hash_a, 1000, 0, 0)
        assert entry(2) == (hash_b, 1000, 0, 0)
        assert entry(3) == (hash_a, 2000, 4, 1)  # 4.999 s after beginTimestamp, chained to entry 1


def test_reload_finds_everything_and_keeps_writing_the_newest_file():
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        index = service(directory, entries=5)
        for n in range(6):  # two files, the second one half full
            index.put("T", ["key"], n, T0 + n)
        index.close()
        index = service(directory, entries=5)
        assert index.query("T", "key", 10, *ALL_TIME) == [5, 4, 3, 2, 1, 0]
        assert index.max_phys_offset == 5
        index.put("T", ["key"], 6, T0 + 6)
        assert len(file_names(directory)) == 2
        assert index.query("T", "key", 10, *ALL_TIME) == [6, 5, 4, 3, 2, 1, 0]
        index.close()


def test_a_full_newest_file_is_not_written_after_reload():
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        index = service(directory, entries=3)
        index.put("T", ["a", "b"], 1, T0)
        index.close()
        index = service(directory, entries=3)
        index.put("T", ["c"], 2, T0 + 1)
        assert len(file_names(directory)) == 2
        assert index.query("T", "a", 10, *ALL_TIME) == [1]
        assert index.query("T", "c", 10, *ALL_TIME) == [2]
        index.close()


def test_a_never_written_file_loads_as_empty():
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        index = service(directory, entries=3)
        index.put("T", ["a"], 1, T0)
        index.close()
        size = HEADER_SIZE + SLOTS * SLOT_SIZE + 3 * ENTRY_SIZE
        (directory / "29991231235959999").write_bytes(bytes(size))  # created, then a crash
        index = service(directory, entries=3)
        assert index.query("T", "a", 10, T0 - 1000, T0 + 1000) == [1]  # its zero timestamps are ignored
        index.put("T", ["b"], 2, T0 + 1)
        assert len(file_names(directory)) == 2
        assert index.query("T", "b", 10, *ALL_TIME) == [2]
        index.close()


class SimulatedCrash(Exception):
    pass


@pytest.mark.parametrize("writes_before_crash", range(4))  # a one-key put writes entry, count, slot, header
def test_a_crash_at_any_write_of_a_put_never_cuts_off_older_entries(monkeypatch, writes_before_crash):
    budget = [writes_before_crash]

    class CrashingStruct(struct.Struct):
        def pack_into(self, *args):
            if budget[0] == 0:
                raise SimulatedCrash
            budget[0] -= 1
            super().pack_into(*args)

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        index = service(directory, slots=1)  # one chain holds every key
        index.put("T", ["a"], 1, T0)
        with monkeypatch.context() as patch:
            # The write order is the Python reference's (the C version keeps it): crash it there.
            patch.setattr(index_module, "put_entries", index_module.put_index_entries)
            for name in ("HEADER", "SLOT", "ENTRY"):
                patch.setattr(index_module, name, CrashingStruct(getattr(index_module, name).format))
            with pytest.raises(SimulatedCrash):
                index.put("T", ["b"], 2, T0 + 1)
        index.close()  # the mapped pages hold what a killed process would leave
        index = service(directory, slots=1)
        index.put("T", ["c"], 3, T0 + 2)
        assert index.query("T", "a", 10, *ALL_TIME) == [1]
        assert index.query("T", "c", 10, *ALL_TIME) == [3]
        index.close()


def test_a_query_skips_a_file_unmapped_by_retention_meanwhile():
    with tempfile.TemporaryDirectory() as tmp:
        index = service(Path(tmp), entries=3)
        for n in range(4):
            index.put("T", ["key"], n, T0 + n)
        walking = index._files  # the list a query in progress holds
        assert index.delete_files_below(2) == 1  # retention unmaps the oldest file meanwhile
        remaining, index._files = index._files, walking
        assert index.query("T", "key", 10, *ALL_TIME) == [3, 2]
        index._files = remaining
        index.close()


@pytest.mark.parametrize(("slots", "entries"), [(0, 100), (64, 1)])
def test_sizes_too_small_to_hold_a_key_are_refused(slots, entries):
    with tempfile.TemporaryDirectory() as tmp, pytest.raises(ValueError, match="too small"):
        service(Path(tmp), slots=slots, entries=entries)


def test_a_file_of_the_wrong_size_is_refused():
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "20240101000000000").write_bytes(bytes(100))
        with pytest.raises(StoreError, match="20240101000000000"):
            service(directory)


def test_delete_files_below_spares_the_newest_file():
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        index = service(directory, entries=3)  # two keys per file
        for n in range(6):
            index.put("T", ["key"], n * 100, T0 + n)  # files end at offsets 100, 300, 500
        assert len(file_names(directory)) == 3
        assert index.delete_files_below(100) == 0  # endPhyOffset 100 is not below 100
        assert index.delete_files_below(101) == 1
        assert index.query("T", "key", 10, *ALL_TIME) == [500, 400, 300, 200]
        assert index.delete_files_below(10_000) == 1  # the newest file stays
        assert len(file_names(directory)) == 1
        assert index.query("T", "key", 10, *ALL_TIME) == [500, 400]
        assert index.max_phys_offset == 500
        index.close()


def test_destroy_removes_every_file_and_leaves_a_usable_service():
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        index = service(directory, entries=3)
        for n in range(4):
            index.put("T", ["key"], n, T0 + n)
        index.destroy()
        assert file_names(directory) == []
        assert index.max_phys_offset == 0
        assert index.query("T", "key", 10, *ALL_TIME) == []
        index.put("T", ["key"], 9, T0 + 9)
        assert index.query("T", "key", 10, *ALL_TIME) == [9]
        index.close()


def test_max_phys_offset_is_zero_without_files():
    with tempfile.TemporaryDirectory() as tmp:
        index = service(Path(tmp) / "index")  # the directory need not exist yet
        assert index.max_phys_offset == 0
        index.put("T", ["key"], 4242, T0)
        assert index.max_phys_offset == 4242
        index.close()


def test_flush_syncs_only_files_written_since_the_last_flush(monkeypatch):
    synced: list[str] = []
    monkeypatch.setattr(MappedFile, "sync", lambda self: synced.append(self.path.name))
    with tempfile.TemporaryDirectory() as tmp:
        index = service(Path(tmp), entries=3)
        index.put("T", ["a", "b"], 1, T0)
        index.put("T", ["c"], 2, T0)
        index.flush()
        assert len(synced) == 2
        index.flush()
        assert len(synced) == 2
        index.put("T", ["d"], 3, T0)
        index.flush()
        assert synced[2:] == [synced[1]]  # the newest file only
        index.close()


@pytest.mark.parametrize(
    ("code", "error", "message"),
    [(errno.ENOSPC, DiskFullError, "disk full"), (errno.EIO, StoreError, os.strerror(errno.EIO))],
)
def test_file_creation_errors_become_store_errors(monkeypatch, code, error, message):
    def fail(fd, offset, length):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "posix_fallocate", fail)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        index = service(directory)
        with pytest.raises(error, match=message) as raised:
            index.put("T", ["key"], 1, T0)
        assert type(raised.value) is error
        assert file_names(directory) == []  # no half-made file left behind
