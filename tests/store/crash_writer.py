"""A SYNC_FLUSH writer for the crash test: prints one line per acknowledged message until killed.

Usage: python crash_writer.py STORE_DIR ROUND SEED. Each line is "topic queue id". It stops by itself
after MAX_MESSAGES or MAX_SECONDS in case nobody kills it.
"""

import random
import sys
import time
from pathlib import Path

from ferrymq.protocol.batch import encode_batch
from ferrymq.protocol.properties import encode_properties
from ferrymq.store import SYNC_FLUSH, MessageStore, PutStatus, StoreConfig

MAX_MESSAGES = 50_000
MAX_SECONDS = 60


def crash_config(root: Path) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=root,
        flush_disk_type=SYNC_FLUSH,
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=500 * 20,
        max_hash_slot_num=1024,
        max_index_num=20_000,
    )


def body_of(msg_id: str) -> bytes:
    """The body every message with this id must have, byte for byte."""
    rnd = random.Random(msg_id)
    return msg_id.encode() + b":" + rnd.randbytes(rnd.randint(10, 3000))


def placement(msg_id: str) -> tuple[str, int]:
    rnd = random.Random("where" + msg_id)
    return f"Crash{rnd.randint(0, 2)}", rnd.randint(0, 3)


def main() -> None:
    root, round_no, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    rnd = random.Random(seed * 1000 + round_no)
    store = MessageStore(crash_config(root)).open()
    out = sys.stdout
    seq = 0
    deadline = time.monotonic() + MAX_SECONDS
    while seq < MAX_MESSAGES and time.monotonic() < deadline:
        ids = [f"r{round_no}-{seq + i}" for i in range(rnd.choice([1, 1, 1, 4, 16]))]
        seq += len(ids)
        topic, queue = placement(ids[0])
        if len(ids) == 1:
            result = store.put_message(topic, queue, body_of(ids[0]), encode_properties({"KEYS": ids[0]}))
        else:
            entries = [(body_of(i), encode_properties({"KEYS": i}).encode(), 0) for i in ids]
            result = store.put_batch(topic, queue, encode_batch(entries))
        if result.wait() is PutStatus.PUT_OK:
            out.write("".join(f"{topic} {queue} {i}\n" for i in ids))
            out.flush()
    store.close()


if __name__ == "__main__":
    main()
