import pytest

from ferrymq.protocol.message_ext import decode_records
from ferrymq.protocol.properties import encode_properties
from ferrymq.store import MessageStore, StoreConfig


def small_config(root, **overrides) -> StoreConfig:
    """A store with tiny files, so roll-overs and retention happen within a test."""
    settings = dict(
        store_path_root_dir=root,
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=100 * 20,
        max_hash_slot_num=128,
        max_index_num=1000,
    )
    settings.update(overrides)
    return StoreConfig(**settings)


@pytest.fixture
def open_store(tmp_path):
    """Open stores on tmp_path (same directory each call) and close whatever is left open."""
    stores = []

    def _open(**overrides) -> MessageStore:
        store = MessageStore(small_config(tmp_path / "store", **overrides)).open()
        stores.append(store)
        return store

    yield _open
    for store in stores:
        store.close()


def props(**kv) -> bytes:
    return encode_properties(kv).encode()


def read_queue(store, topic, queue_id, start=0):
    """Every message of a queue from `start`, decoded and CRC-checked."""
    out, offset = [], start
    while True:
        result = store.get_messages(topic, queue_id, offset, max_count=1000, max_bytes=1 << 30)
        if not result.message_count:
            return out
        out += decode_records(b"".join(result.buffers), verify_crc=True)
        offset = result.next_begin_offset
