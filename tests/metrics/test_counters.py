"""The plain-int counters servers keep on the hot path."""

from ferrymq.metrics.tally import Tally
from ferrymq.net.latency import BOUNDS_MS, RequestLatency


def test_latency_buckets_are_inclusive_upper_bounds_in_milliseconds():
    latency = RequestLatency()
    for seconds in (0.0005, 0.001, 0.0011, 10.0):
        latency.record(310, 0, seconds)
    [(request, response, row)] = latency.rows()
    assert (request, response) == (310, 0)
    assert len(row) == len(BOUNDS_MS) + 2
    assert row[0] == 2  # 0.5 ms and exactly 1 ms
    assert row[1] == 1  # 1.1 ms: up to 3 ms
    assert row[len(BOUNDS_MS)] == 1  # 10 s: past the last bound
    assert abs(row[-1] - 10_002.6) < 1e-6


def test_tally_adds_messages_and_bytes_by_key():
    tally: Tally[str] = Tally()
    tally.add("a", 32, 4096)
    tally.add("a", 1, 10)
    tally.add("b", 2, 20)
    assert sorted(tally.items()) == [("a", 33, 4106), ("b", 2, 20)]
