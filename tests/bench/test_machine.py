"""The machine description saved beside every benchmark result."""

from __future__ import annotations

import json

from ferrymq.bench.machine import fresh_page_cost, machine_info


def test_machine_info_carries_the_speeds_that_make_figures_comparable():
    info = json.loads(json.dumps(machine_info()))  # saved as JSON
    assert info["cores"] >= 1 and info["memory_gib"] > 0
    for speed in ("python_ns_per_loop", "syscall_ns", "fresh_page_us"):
        assert isinstance(info[speed], float) and info[speed] > 0, speed


def test_fresh_page_cost_is_per_page_not_per_chunk():
    # Bounded below by a page's memory write, above by anything a usable machine takes per page (1 ms).
    assert 0 < fresh_page_cost(mib=8, chunks=2) < 1000
