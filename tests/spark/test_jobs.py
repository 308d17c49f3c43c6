"""The `ferrymq spark` jobs, run through the real CLI on the suite's SparkSession."""

from __future__ import annotations

import json
import re
import time

import pytest
from click.testing import CliRunner
from PIL import Image

from ferrymq.cli.main import main
from ferrymq.client import Message
from ferrymq.protocol.trace import (
    MessageType,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    encode_records,
)
from ferrymq.spark.progress import reporting

from .browser import render

pytestmark = pytest.mark.spark


def read_topic(spark, cluster, topic: str):
    return spark.read.format("ferrymq").option("namesrv", cluster.namesrv_addr).option("topic", topic).load()


def test_replay_copies_an_offset_range_with_keys_tags_properties_and_msg_ids(spark, cluster):
    cluster.create_topic("ReplayFrom", 1)
    cluster.create_topic("ReplayTo", 2)
    sent = cluster.send(
        [
            Message("ReplayFrom", f"r{i}".encode(), tags="R", keys=f"k{i}", properties={"i": str(i)})
            for i in range(20)
        ]
    )
    tracker = spark.sparkContext.statusTracker()
    jobs_before = set(tracker.getJobIdsForGroup())
    result = CliRunner().invoke(
        main,
        ["spark", "replay", "--namesrv", cluster.namesrv_addr, "--topic", "ReplayFrom",
         "--to-topic", "ReplayTo", "--from-offsets", json.dumps({"ReplayFrom": {"0": 5}}),
         "--to-offsets", json.dumps({"ReplayFrom": {"0": 15}})],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "replayed 10 messages" in result.output
    assert len(set(tracker.getJobIdsForGroup()) - jobs_before) == 1, "the source was read more than once"
    cluster.settle()
    copies = {r.body: r for r in read_topic(spark, cluster, "ReplayTo").collect()}
    assert set(copies) == {f"r{i}".encode() for i in range(5, 15)}
    for i in range(5, 15):
        c = copies[f"r{i}".encode()]
        assert (c.tags, c.keys, c.properties["i"], c.msg_id) == ("R", [f"k{i}"], str(i), sent[i].msg_id)
        assert "MIN_OFFSET" not in c.properties and "REAL_TOPIC" not in c.properties


def test_progress_lines_come_from_the_status_tracker(spark):
    lines: list[str] = []
    with reporting(spark, lines.append, interval=0.2):
        spark.sparkContext.parallelize(range(4), 4).map(lambda x: time.sleep(1.5) or x).collect()
    pattern = r"stage \d+ \(collect\): [0-3]/4 tasks done, [1-4] running"
    assert any(re.fullmatch(pattern, line) for line in lines), lines


def test_replay_reports_a_bad_range_clearly(spark, cluster):
    result = CliRunner().invoke(
        main,
        ["spark", "replay", "--namesrv", cluster.namesrv_addr, "--topic", "NoSuchTopic", "--to-topic", "X"],
    )
    assert result.exit_code == 1 and "topic NoSuchTopic does not exist" in result.output


def trace_messages(t0: int) -> list[bytes]:
    """Traces of 100 sends to Orders (one more failed), consumed by G1 (10 retried, 2 failures)
    and partly by G2, with known latencies: 50 ms for the first half, 150 ms for the rest."""
    records = [PubRecord(timestamp=t0 + i * 1000, region_id="DefaultRegion", group="PG", topic="Orders",
                         msg_id=f"M{i}", tags="T", keys=f"k{i}", store_host="127.0.0.1:10911", body_length=10,
                         cost_time=2, msg_type=MessageType.NORMAL, offset_msg_id="", success=True)
               for i in range(100)]  # fmt: skip
    records.append(PubRecord(timestamp=t0, region_id="r", group="PG", topic="Orders", msg_id="MF", tags="",
                             keys="", store_host="", body_length=1, cost_time=3000,
                             msg_type=MessageType.NORMAL,
                             offset_msg_id="", success=False))  # fmt: skip
    for i in range(100):
        delivered = t0 + i * 1000 + (50 if i < 50 else 150)
        records.append(SubBeforeRecord(timestamp=delivered, region_id="r", group="G1", request_id=f"R{i}",
                                       msg_id=f"M{i}", retry_times=0, keys=f"k{i}"))  # fmt: skip
        records.append(
            SubAfterRecord(request_id=f"R{i}", msg_id=f"M{i}", cost_time=1, success=i >= 2, keys="")
        )
        if i < 10:
            records.append(
                SubBeforeRecord(
                    timestamp=delivered + 10_000,
                    region_id="r",
                    group="G1",
                    request_id=f"RR{i}",
                    msg_id=f"M{i}",
                    retry_times=1,
                    keys="",
                )
            )
            records.append(
                SubAfterRecord(request_id=f"RR{i}", msg_id=f"M{i}", cost_time=1, success=True, keys="")
            )
            records.append(
                SubBeforeRecord(
                    timestamp=t0 + i * 1000 + 10,
                    region_id="r",
                    group="G2",
                    request_id=f"S{i}",
                    msg_id=f"M{i}",
                    retry_times=0,
                    keys="",
                )
            )
    bodies = [encode_records(records[i : i + 10]) for i in range(0, len(records), 10)]
    return [*bodies, b"Pub\x01not-a-time" + b"\x01x" * 12 + b"\x02"]


def test_trace_report_figures_parquet_and_html(spark, cluster, tmp_path):
    traces = "JobsTraceTopic"  # RMQ_SYS_TRACE_TOPIC is the docs' (test_docs.py)
    cluster.create_topic(traces, 2)
    cluster.create_topic("%DLQ%G1", 1)
    t0 = int(time.time() * 1000) - 200_000
    cluster.send([Message(traces, body) for body in trace_messages(t0)])
    cluster.send([Message("%DLQ%G1", b"dead") for _ in range(3)])
    out = tmp_path / "report"
    result = CliRunner().invoke(
        main,
        [
            "spark",
            "trace-report",
            "--namesrv",
            cluster.namesrv_addr,
            "--out",
            str(out),
            "--trace-topic",
            traces,
        ],
    )
    assert result.exit_code == 0, result.output
    assert "332 trace records" in result.output

    latency = {(r.topic, r.group): r for r in spark.read.parquet(str(out / "latency")).collect()}
    g1, g2 = latency["Orders", "G1"], latency["Orders", "G2"]
    assert (g1.deliveries, g1.p50_ms, g1.p90_ms, g1.max_ms) == (100, 50, 150, 150)
    assert (g2.deliveries, g2.p50_ms, g2.max_ms) == (10, 10, 10)
    (retries,) = [r for r in spark.read.parquet(str(out / "retries")).collect() if r.group == "G1"]
    assert (retries.topic, retries.redeliveries, retries.failed) == ("Orders", 10, 2)
    assert [(r.topic, r.failed) for r in spark.read.parquet(str(out / "send_failures")).collect()] == [
        ("Orders", 1)
    ]
    produced = spark.read.parquet(str(out / "produced")).collect()
    assert sum(r.messages for r in produced) == 101 and len(produced) > 1
    records = spark.read.parquet(str(out / "records"))
    counts = {r.type: r["count"] for r in records.groupBy("type").count().collect()}
    assert counts == {"Pub": 101, "SubBefore": 120, "SubAfter": 110, "Invalid": 1}

    html = (out / "report.html").read_text()
    assert html.count("<svg") == 3 and "Orders → G1" in html and "%DLQ%group" in html
    assert "<td>G1</td><td>3</td>" in html  # dead letters of G1
    check_in_browser(out / "report.html", tmp_path / "report.png")


def check_in_browser(page, screenshot) -> None:
    """The report as headless Chromium draws it: three charts with their axes' titles, tick labels
    and units in the DOM, and a screenshot that is not blank."""
    dom = render(page, screenshot)
    assert dom.count("<svg") == 3, dom[:2000]
    for text in ("latency (ms)", "store time (hh:mm:ss)", "messages per", "p50", "p99", "Orders", "G1"):
        assert text in dom, f"{text!r} is not in the page Chromium rendered"
    assert re.search(r">\d{2}:\d{2}:\d{2}<", dom), "no time tick labels"
    with Image.open(screenshot) as image:
        colors = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colors is None or len(colors) > 50, "the screenshot is almost blank"
