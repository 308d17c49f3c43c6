"""A short description of the machine, committed beside every benchmark result."""

from __future__ import annotations

import json
import mmap
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path


def machine_info() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory_gib, 1),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "os": f"{platform.system()} {platform.release()}",
        # Other work on the machine when the result was saved: rates mean little at a high load.
        "load_average_1m": round(os.getloadavg()[0], 2),
        # Machines of the same name differ several-fold in speed from one day to the next: this says how
        # fast this one runs plain Python, so figures from different days can be compared.
        "python_ns_per_loop": python_speed(),
        # ... and how fast it enters the kernel, which single sends and small reads pay per request.
        "syscall_ns": syscall_speed(),
        # ... and what the first write to a page of new page cache costs: ~0.2 us on bare metal, 8-18
        # on some VMs, where it dominates a replica's CPU (every stored byte lands in a fresh page).
        "fresh_page_us": fresh_page_cost(),
    }


def publish(result: dict, save: Path | None) -> None:
    """Print a benchmark's result as JSON, and keep it in `save` when given (bench/results/)."""
    text = json.dumps(result, indent=1)
    print(text)
    if save:
        save.write_text(text + "\n")


def python_speed(loops: int = 2_000_000) -> float:
    """Nanoseconds per iteration of a plain Python add loop (best of three)."""
    best = float("inf")
    for _ in range(3):
        started, total = time.perf_counter(), 0
        for i in range(loops):
            total += i
        best = min(best, time.perf_counter() - started)
    return round(best * 1e9 / loops, 1)


def syscall_speed(calls: int = 200_000) -> float:
    """Nanoseconds per getppid() system call (best of three)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(calls):
            os.getppid()
        best = min(best, time.perf_counter() - started)
    return round(best * 1e9 / calls, 1)


def fresh_page_cost(mib: int = 256, chunks: int = 4) -> float:
    """Microseconds per first write to a 4 KiB page of a new sparse file's page cache (median chunk:
    the first may reuse memory just freed)."""
    size, page = mib << 20, mmap.PAGESIZE
    per_chunk = size // chunks
    costs = []
    with tempfile.TemporaryFile() as f:
        f.truncate(size)
        with mmap.mmap(f.fileno(), size) as pages:
            for base in range(0, size, per_chunk):
                started = time.perf_counter()
                for offset in range(base, base + per_chunk, page):
                    pages[offset] = 1
                costs.append((time.perf_counter() - started) * 1e6 / (per_chunk // page))
    return round(statistics.median(costs), 2)
