"""The `ferrymq spark` jobs, run through the real CLI on the suite's SparkSession."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ferrymq.cli.main import main
from ferrymq.client import Message

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
    result = CliRunner().invoke(
        main,
        ["spark", "replay", "--namesrv", cluster.namesrv_addr, "--topic", "ReplayFrom",
         "--to-topic", "ReplayTo", "--from-offsets", json.dumps({"ReplayFrom": {"0": 5}}),
         "--to-offsets", json.dumps({"ReplayFrom": {"0": 15}})],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "replayed 10 messages" in result.output
    cluster.settle()
    copies = {r.body: r for r in read_topic(spark, cluster, "ReplayTo").collect()}
    assert set(copies) == {f"r{i}".encode() for i in range(5, 15)}
    for i in range(5, 15):
        c = copies[f"r{i}".encode()]
        assert (c.tags, c.keys, c.properties["i"], c.msg_id) == ("R", [f"k{i}"], str(i), sent[i].msg_id)
        assert "MIN_OFFSET" not in c.properties and "REAL_TOPIC" not in c.properties


def test_replay_reports_a_bad_range_clearly(spark, cluster):
    result = CliRunner().invoke(
        main,
        ["spark", "replay", "--namesrv", cluster.namesrv_addr, "--topic", "NoSuchTopic", "--to-topic", "X"],
    )
    assert result.exit_code == 1 and "topic NoSuchTopic does not exist" in result.output
