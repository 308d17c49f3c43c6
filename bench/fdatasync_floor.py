"""The disk's floor for a durable ack: 1 KiB written, then fdatasync'd, one at a time.

With one send in flight and SYNC_FLUSH every send waits for one fdatasync, so no broker acknowledges
durably faster than this loop runs on the same disk. It writes as the CommitLog does (into a mapped,
preallocated file, in the directory `ferrymq bench` puts its store in: the temp dir) and prints one
JSON line in the shape of the other benchmarks' (msgs_per_s = fdatasyncs per second).

    .venv/bin/python bench/fdatasync_floor.py [--count 2000] [--body 1024]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import tempfile
import time

FILE_SIZE = 64 << 20


def measure(count: int, body: int) -> dict:
    record = os.urandom(body)
    latencies = []
    with tempfile.TemporaryDirectory(prefix="ferrymq-fdatasync-") as directory:
        fd = os.open(os.path.join(directory, "segment"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, FILE_SIZE)  # as a CommitLog segment: preallocated, then mapped
            os.fdatasync(fd)
            with mmap.mmap(fd, FILE_SIZE) as mm:
                position = 0
                started = time.perf_counter()
                for _ in range(count):
                    began = time.perf_counter()
                    mm[position : position + body] = record
                    os.fdatasync(fd)
                    latencies.append(time.perf_counter() - began)
                    position = (position + body) % (FILE_SIZE - body)
                seconds = time.perf_counter() - started
        finally:
            os.close(fd)
    latencies.sort()

    def ms(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 3)

    return {
        "system": "disk",
        "scenario": f"write {body} B + fdatasync, one at a time",
        "messages": count,
        "body_bytes": body,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(count / seconds),
        "mean_ms": round(seconds / count * 1000, 3),
        "p50_ms": ms(0.5),
        "p90_ms": ms(0.9),
        "p99_ms": ms(0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--body", type=int, default=1024)
    args = parser.parse_args()
    print(json.dumps(measure(args.count, args.body)))


if __name__ == "__main__":
    main()
