"""The plain-int counters servers keep on the hot path, and the text format written from them."""

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from ferrymq.metrics.exposition import render
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


def test_exposition_holds_what_prometheus_client_writes():
    class Families:
        def collect(self):
            counter = CounterMetricFamily("t_messages_total", 'a counter\\with "odd" help', labels=["topic"])
            counter.add_metric(['we"ird\\topic\nname'], 3)
            counter.add_metric(["plain"], 2.5)
            gauge = GaugeMetricFamily("t_lag", "a gauge", labels=["group", "topic"])
            gauge.add_metric(["g", "plain"], float("inf"))
            gauge.add_metric(["g2", "plain"], -7)
            histogram = HistogramMetricFamily("t_latency", "a histogram", labels=["code"])
            histogram.add_metric(["310"], [("1", 1), ("5", 3), ("+Inf", 4)], sum_value=9.5)
            yield from (counter, gauge, histogram)

    def parsed(text: bytes):
        return [(f.name, f.type, f.documentation, sorted(map(tuple, f.samples), key=repr))
                for f in text_string_to_metric_families(text.decode())]  # fmt: skip

    assert parsed(render(Families().collect())) == parsed(generate_latest(Families()))  # type: ignore[arg-type]
