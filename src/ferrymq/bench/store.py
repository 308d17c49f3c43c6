"""`ferrymq bench store`: the storage engine's throughput and recovery time, with no network.

Each scenario runs on a fresh store in a temporary directory and reports messages and bytes per
second. Append figures are the CommitLog append alone (what RocketMQ calls putMessage); the
dispatcher that builds ConsumeQueue and index entries is timed separately, and "with dispatch" is
the sustained rate when one process does both (they share the GIL).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ferrymq.client.uniq_key import UniqKeyGenerator
from ferrymq.protocol.batch import encode_batch
from ferrymq.protocol.properties import encode_properties
from ferrymq.store import ASYNC_FLUSH, SYNC_FLUSH, MessageStore, StoreConfig

Progress = Callable[[str, int, int], None]  # (task, done, total)


def _config(root: Path, flush: str = ASYNC_FLUSH) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, flush_disk_type=flush)


def _properties(uniq: UniqKeyGenerator, i: int) -> bytes:
    return encode_properties(
        {"UNIQ_KEY": uniq.next(), "KEYS": f"order-{i}", "TAGS": "TagA", "WAIT": "true"}
    ).encode()


def bench_append(
    root: Path, count: int, body_size: int, batch: int, flush: str, window: int, progress: Progress
) -> dict:
    """Append `count` messages, one put per message or `batch` per put.

    With SYNC_FLUSH, up to `window` puts are in flight before the writer waits for their group
    commit, as a broker serving `window` producers would.
    """
    count -= count % batch  # whole batches only
    body = os.urandom(body_size)
    uniq = UniqKeyGenerator()
    props = [_properties(uniq, i) for i in range(min(count, 10_000))]
    # Batch bodies arrive encoded from the producer: build them before the clock starts.
    batches = [
        encode_batch([(body, props[(b * batch + i) % len(props)], 0) for i in range(batch)])
        for b in range(64)
    ]
    name = f"append {'batch ' + str(batch) if batch > 1 else 'single'} {flush.lower()}"
    with MessageStore(_config(root, flush)) as store:
        pending = []
        done = 0
        # Holding the dispatcher's lock keeps it off the CPU, so the first figure is the CommitLog
        # append alone; the dispatcher then catches up and is timed on its own.
        with store.dispatcher.lock:
            started = time.perf_counter()
            while done < count:
                n = batch
                if batch == 1:
                    result = store.put_message("BenchTopic", done % 8, body, props[done % len(props)])
                else:
                    result = store.put_batch("BenchTopic", (done // batch) % 8, batches[(done // batch) % 64])
                if not result.ok:
                    raise RuntimeError(f"put failed: {result.status.name} {result.remark}")
                if flush == SYNC_FLUSH:
                    pending.append(result)
                    if len(pending) >= window:
                        _wait_all(pending)
                done += n
                if done % 10_000 < n:
                    progress(name, done, count)
            _wait_all(pending)
            put_seconds = time.perf_counter() - started
        started = time.perf_counter()
        store.wait_dispatched(timeout=600)
        dispatch_seconds = time.perf_counter() - started
    progress(name, count, count)
    return {
        "scenario": name,
        "messages": count,
        "body_bytes": body_size,
        "msgs_per_s": round(count / put_seconds),
        "mb_per_s": round(count * body_size / put_seconds / 1e6, 1),
        "dispatch_msgs_per_s": round(count / dispatch_seconds),
        "msgs_per_s_with_dispatch": round(count / (put_seconds + dispatch_seconds)),
    }


def _wait_all(pending: list) -> None:
    for result in pending:
        if result.wait().name != "PUT_OK":
            raise RuntimeError("sync flush timed out")
    pending.clear()


def bench_read(root: Path, count: int, body_size: int, max_count: int, progress: Progress) -> dict:
    """Read a whole queue back with get_messages, `max_count` per call, as pulls would."""
    body = os.urandom(body_size)
    with MessageStore(_config(root)) as store:
        batch = encode_batch([(body, b"TAGS\x01TagA\x02", 0)] * 64)
        for _ in range(count // 64):
            store.put_batch("ReadTopic", 0, batch)
        store.wait_dispatched(timeout=600)
        name = f"read max_count={max_count}"
        read = size = 0
        offset = 0
        started = time.perf_counter()
        while True:
            got = store.get_messages(
                "ReadTopic", 0, offset, max_count, max_bytes=max_count * (body_size + 200)
            )
            if not got.message_count:
                break
            read += got.message_count
            size += got.total_size
            offset = got.next_begin_offset
            if read % 50_000 < got.message_count:
                progress(name, read, count)
        seconds = time.perf_counter() - started
    return {
        "scenario": name,
        "messages": read,
        "msgs_per_s": round(read / seconds),
        "gb_per_s": round(size / seconds / 1e9, 2),
    }


_RECOVERY_WRITER = """
import os, sys
from pathlib import Path
from ferrymq.protocol.batch import encode_batch
from ferrymq.store import MessageStore, StoreConfig
root, target = Path(sys.argv[1]), int(sys.argv[2])
store = MessageStore(StoreConfig(store_path_root_dir=root)).open()
body = os.urandom(1024)
batch = encode_batch([(body, b"KEYS\\x01k\\x02TAGS\\x01TagA\\x02", 0)] * 64)
queue = 0
while store.commitlog.max_offset < target:
    store.put_batch("RecoverTopic", queue % 8, batch)
    queue += 1
store.wait_dispatched(timeout=600)
print("ready", flush=True)
sys.stdin.read()
"""


def bench_recovery(root: Path, gib: float, progress: Progress) -> list[dict]:
    """Write `gib` GiB, SIGKILL the writer, then time recovery: from the checkpoint, and a full rebuild."""
    target = int(gib * (1 << 30))
    progress("recovery: writing", 0, 1)
    proc = subprocess.Popen(
        [sys.executable, "-c", _RECOVERY_WRITER, str(root), str(target)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None  # a pipe, as asked
    line = proc.stdout.readline()
    if line.strip() != b"ready":
        proc.kill()
        raise RuntimeError("recovery writer failed")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    progress("recovery: writing", 1, 1)
    results = []
    for name, wipe in (
        ("recovery after SIGKILL (from checkpoint)", False),
        ("full rebuild after SIGKILL", True),
    ):
        if wipe:
            shutil.rmtree(root / "consumequeue")
            shutil.rmtree(root / "index")
            for f in ("checkpoint", "checkpoint.bak"):
                (root / f).unlink(missing_ok=True)
        (root / "abort").touch()
        started = time.perf_counter()
        store = MessageStore(_config(root)).open()
        opened = time.perf_counter() - started
        store.wait_dispatched(timeout=600)  # the indexer rebuilds the index beside it
        seconds = time.perf_counter() - started
        size = store.commitlog.max_offset - store.commitlog.min_offset
        scanned = store.recovered_bytes
        store.close()
        gib = scanned / (1 << 30)
        results.append(
            {
                "scenario": name,
                "commitlog_gib": round(size / (1 << 30), 3),
                "scanned_gib": round(gib, 3),
                "seconds_to_open": round(opened, 2),
                "seconds_until_indexed": round(seconds, 2),
                "seconds_per_gib_scanned": round(seconds / gib, 2) if scanned else None,
            }
        )
    return results


def run_store_bench(
    count: int, body_size: int, recovery_gib: float, repeat: int, progress: Progress
) -> list[dict]:
    """Every scenario `repeat` times on a fresh store; report the median run and the spread."""
    results = []
    scenarios = [
        lambda d: bench_append(d, count, body_size, 1, ASYNC_FLUSH, 1, progress),
        lambda d: bench_append(d, count, body_size, 32, ASYNC_FLUSH, 1, progress),
        lambda d: bench_append(d, count // 4, body_size, 1, SYNC_FLUSH, 64, progress),
        lambda d: bench_append(d, count, body_size, 32, SYNC_FLUSH, 8, progress),
        lambda d: bench_read(d, count, body_size, 32, progress),
        lambda d: bench_read(d, count, body_size, 1024, progress),
    ]
    for scenario in scenarios:
        runs = []
        for _ in range(repeat):
            with tempfile.TemporaryDirectory(prefix="ferrymq-bench-", dir=_bench_dir()) as d:
                runs.append(scenario(Path(d)))
        runs.sort(key=lambda r: r["msgs_per_s"])
        median = dict(runs[len(runs) // 2])
        median["msgs_per_s_runs"] = [r["msgs_per_s"] for r in runs]
        results.append(median)
    if recovery_gib > 0:
        with tempfile.TemporaryDirectory(prefix="ferrymq-bench-", dir=_bench_dir()) as d:
            results += bench_recovery(Path(d), recovery_gib, progress)
    return results


def _bench_dir() -> str | None:
    """Where scratch stores go: FERRYMQ_BENCH_DIR, else the system temp dir (must be a real disk)."""
    return os.environ.get("FERRYMQ_BENCH_DIR")
