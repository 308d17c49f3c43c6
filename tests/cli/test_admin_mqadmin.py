"""`ferrymq admin` under mqadmin's names, against a real in-process NameServer and Broker: `-n`
after the command or NAMESRV_ADDR, text tables by default and `--output json`, clear errors."""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner

from ferrymq.cli.main import main
from ferrymq.client import Admin, Message, Producer, PullConsumer

from ..broker.conftest import make_cluster  # noqa: F401  (fixture)
from ..sdk.test_admin import _has, eventually


async def run(*args: str, env: dict[str, str] | None = None, ok: bool = True) -> str:
    result = await asyncio.to_thread(CliRunner().invoke, main, ["admin", *args], env=env)
    if ok:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code != 0 and "Error:" in result.output and "Traceback" not in result.output
    return result.output


async def as_json(*args: str) -> object:
    return json.loads(await run(*args, "-o", "json"))


async def test_mqadmin_commands_in_text_and_json(make_cluster):  # noqa: F811
    cluster = await make_cluster()
    n = ("-n", cluster.namesrv_addr)
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic("Shop", queue_nums=2)
        await eventually(lambda: _has(admin, "Shop"), "the topic's route")
    async with Producer("PG", cluster.namesrv_addr) as producer:
        for i in range(4):
            await producer.send(Message("Shop", f"{i}".encode()))
    await cluster.settled()
    async with PullConsumer("Buyers", cluster.namesrv_addr, consume_from="first") as consumer:
        await consumer.subscribe("Shop")
        got = []
        while len(got) < 4:
            got += await consumer.poll(2.0)
        await consumer.commit()

    # -n after the command, before it, or NAMESRV_ADDR; old names and mqadmin's
    assert "Shop" in await as_json("topicList", *n)
    assert "Shop" in (await run(*n, "topics")).split()
    assert "Shop" in await as_json("topicList", "-c", "DefaultCluster", *n)
    text = await run("topicStatus", "-t", "Shop", env={"NAMESRV_ADDR": cluster.namesrv_addr})
    assert "max offset" in text and "broker-a" in text
    assert "total lag 0" in await run("progress", "Buyers", "Shop", *n)
    assert await as_json("progress", "Buyers", "Shop", *n) == [
        {"broker": "broker-a", "queue": q, "broker offset": 2, "consumer offset": 2, "lag": 0} for q in (0, 1)
    ]

    status = await as_json("topicStatus", "-t", "Shop", *n)
    assert sum(q["maxOffset"] for q in status) == 4 and {q["queueId"] for q in status} == {0, 1}
    progress = await as_json("consumerProgress", "-g", "Buyers", *n)
    assert progress["diffTotal"] == 0 and sum(q["consumerOffset"] for q in progress["offsetTable"]) == 4
    assert "diff total 0" in await run("consumerProgress", "-g", "Buyers", *n)
    every = await as_json("consumerProgress", *n)
    assert {"group": "Buyers", "topics": 1, "consumeTps": 0.0, "diffTotal": 0} in every
    brokers = await as_json("brokerStatus", *n)
    assert (
        len(brokers["broker-a"]["putTps"].split()) == 3 and brokers["broker-a"]["msgPutTotalTodayNow"] == "4"
    )
    assert "getTransferedTps" in await run("brokerStatus", "-b", cluster.broker_addr, *n)
    assert await as_json("topicClusterList", "-t", "Shop", *n) == ["DefaultCluster"]
    assert (await as_json("topicRoute", "-t", "Shop", *n))["queueDatas"][0]["brokerName"] == "broker-a"
    assert "Buyers" in await as_json("queryTopicConsumeByWho", "-t", "Shop", *n)
    assert "TBW102" in await as_json("getSystemTopicList", *n)
    assert "Shop" in (await as_json("getAllTopicConfig", *n))["broker-a"]
    assert (
        "Buyers"
        in (await as_json("getAllSubscriptionGroup", "-b", cluster.broker_addr, *n))[cluster.broker_addr]
    )
    cq = await as_json("queryCq", "-t", "Shop", "-q", "0", "-c", "5", *n)
    assert cq["maxQueueIndex"] == 2 and len(cq["queueData"]) == 2
    assert "CommitLog offset" in await run("queryCq", "-t", "Shop", "-q", "1", *n)

    settings = await as_json("getBrokerConfig", *n)
    assert settings["broker-a"]["brokerName"] == "broker-a"
    await run("updateBrokerConfig", "-k", "shortPollingTimeMills", "-v", "500", "-b", cluster.broker_addr, *n)
    assert cluster.broker.config.short_polling_time_mills == 500
    refused = await run("updateBrokerConfig", "-k", "bogus", "-v", "1", *n, ok=False)
    assert "unknown setting 'bogus'" in refused
    (ns_settings,) = (await as_json("getNamesrvConfig", *n)).values()
    assert ns_settings["scanNotActiveBrokerInterval"] == "5000"
    await run("updateNamesrvConfig", "-k", "scanNotActiveBrokerInterval", "-v", "4000", *n)
    assert cluster.namesrv.config.scan_not_active_broker_interval == 4000

    wiped = await as_json("wipeWritePerm", "-b", "broker-a", *n)
    assert next(iter(wiped.values())) > 0
    assert "topics" in await run("addWritePerm", "-b", "broker-a", *n)
    assert "cloned to Sellers" in await run(
        "cloneGroupOffset", "-s", "Buyers", "-d", "Sellers", "-t", "Shop", *n
    )
    assert (await as_json("consumerProgress", "-g", "Sellers", "-t", "Shop", *n))["diffTotal"] == 0

    # the older listings speak JSON too
    (group,) = await as_json("clusterList", *n)
    assert group["broker_name"] == "broker-a" and group["replicas"][0]["role"] == "master"
    assert (await as_json("consumers", "Buyers", *n))["controls"]["broker-a"]["paused"] is False
    assert await as_json("dlq", "list", "Buyers", *n) == []
    assert await as_json("query-key", "Shop", "no-such-key", *n) == []

    # errors: RocketMQ's remark, no traceback
    assert "topic[Nope] not exist" in await run(
        "consumerProgress", "-g", "Buyers", "-t", "Nope", *n, ok=False
    )
    assert "does not exist" in await run("topicStatus", "-t", "Nope", *n, ok=False)
    assert "topic Nope does not exist" in await run("topicRoute", "-t", "Nope", *n, ok=False)
    assert "topic Nope does not exist" in await run("topicClusterList", "-t", "Nope", *n, ok=False)
    assert "not online" in await run("consumerConnection", "-g", "Nobody", *n, ok=False)
    assert "not online" in await run("producerConnection", "-g", "Nobody", *n, ok=False)
    assert "not online" in await run("consumerStatus", "-g", "Nobody", *n, ok=False)
    await run("-n", "127.0.0.1:1", "topicList", *n)  # the command's own -n wins
