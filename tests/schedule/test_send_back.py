"""CONSUMER_SEND_MSG_BACK and retry-topic sends against a real broker: the retry ladder and the DLQ."""

from __future__ import annotations

import json

from ferrymq.client import Message
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.topic_names import SCHEDULE_TOPIC

from .conftest import collect


async def _send_back(cluster, m, group: str, delay_level: int = 0, max_times: int | None = None):
    ext = {"offset": m.commitlog_offset, "group": group, "delayLevel": delay_level,
           "originMsgId": m.msg_id, "originTopic": m.topic}  # fmt: skip
    if max_times is not None:
        ext["maxReconsumeTimes"] = max_times
    return await cluster.call(RequestCode.CONSUMER_SEND_MSG_BACK, ext)


async def _topic_config(cluster, topic: str) -> dict:
    response = await cluster.call(RequestCode.GET_ALL_TOPIC_CONFIG)
    return json.loads(bytes(response.body))["topicConfigTable"][topic]


async def test_a_failed_message_climbs_the_retry_ladder_then_lands_in_the_dlq(cluster, producer):
    sent = await producer.send(Message("Orders", b"fails", tags="T", keys="order-1"))
    [(_, first)] = await collect(cluster.namesrv_addr, "Orders", 1)
    response = await _send_back(cluster, first, "g1", max_times=2)
    assert response.code == ResponseCode.SUCCESS, response.remark
    retry = await _topic_config(cluster, "%RETRY%g1")
    assert (retry["readQueueNums"], retry["writeQueueNums"], retry["perm"]) == (1, 1, 6)
    # Attempt 1 waits at level 3, attempt 2 at level 4 (both 1 s with the short test levels).
    assert cluster.broker.store.get_max_offset(SCHEDULE_TOPIC, 2) == 1
    [(_, again)] = await collect(cluster.namesrv_addr, "%RETRY%g1", 1)
    assert again.body == b"fails" and again.reconsume_times == 1
    assert again.properties["RETRY_TOPIC"] == "Orders"
    assert again.properties["ORIGIN_MESSAGE_ID"] == first.offset_msg_id
    assert again.tags == "T" and again.keys == ["order-1"] and again.msg_id == sent.msg_id

    assert (await _send_back(cluster, again, "g1", max_times=2)).code == ResponseCode.SUCCESS
    assert cluster.broker.store.get_max_offset(SCHEDULE_TOPIC, 3) == 1
    retried = await collect(cluster.namesrv_addr, "%RETRY%g1", 1, group="reader2", total=2)
    third = retried[1][1]
    assert third.reconsume_times == 2 and third.properties["ORIGIN_MESSAGE_ID"] == first.offset_msg_id

    assert (await _send_back(cluster, third, "g1", max_times=2)).code == ResponseCode.SUCCESS
    [(_, dead)] = await collect(cluster.namesrv_addr, "%DLQ%g1", 1)
    assert dead.body == b"fails" and dead.reconsume_times == 3
    assert dead.properties["RETRY_TOPIC"] == "Orders" and "DELAY" not in dead.properties
    dlq = await _topic_config(cluster, "%DLQ%g1")
    assert (dlq["readQueueNums"], dlq["perm"]) == (1, 6)


async def test_a_negative_delay_level_dead_letters_at_once(cluster, producer):
    await producer.send(Message("Poison", b"p"))
    [(_, m)] = await collect(cluster.namesrv_addr, "Poison", 1)
    assert (await _send_back(cluster, m, "g2", delay_level=-1)).code == ResponseCode.SUCCESS
    [(_, dead)] = await collect(cluster.namesrv_addr, "%DLQ%g2", 1, timeout=5)
    assert dead.body == b"p" and dead.reconsume_times == 1


async def test_the_groups_retry_max_times_applies_when_the_header_has_none(cluster, producer):
    body = json.dumps({"groupName": "g3", "retryQueueNums": 1, "retryMaxTimes": 0}).encode()
    assert (await cluster.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)).code == 0
    await producer.send(Message("Strict", b"s"))
    [(_, m)] = await collect(cluster.namesrv_addr, "Strict", 1)
    assert (await _send_back(cluster, m, "g3")).code == ResponseCode.SUCCESS
    [(_, dead)] = await collect(cluster.namesrv_addr, "%DLQ%g3", 1, timeout=5)
    assert dead.body == b"s"


async def test_a_group_without_retry_queues_drops_failures(cluster, producer):
    body = json.dumps({"groupName": "g4", "retryQueueNums": 0}).encode()
    assert (await cluster.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)).code == 0
    await producer.send(Message("Dropped", b"d"))
    [(_, m)] = await collect(cluster.namesrv_addr, "Dropped", 1)
    assert (await _send_back(cluster, m, "g4")).code == ResponseCode.SUCCESS
    assert cluster.broker.topics.get("%RETRY%g4") is None


async def test_bad_send_backs_get_clear_errors(make_cluster):
    cluster = await make_cluster(auto_create_subscription_group=False)
    ext = {"offset": 0, "group": "nobody", "delayLevel": 0}
    response = await cluster.call(RequestCode.CONSUMER_SEND_MSG_BACK, ext)
    assert response.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "nobody" in response.remark
    body = json.dumps({"groupName": "g5"}).encode()
    assert (await cluster.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)).code == 0
    response = await cluster.call(
        RequestCode.CONSUMER_SEND_MSG_BACK, {**ext, "group": "g5", "offset": 123456}
    )
    assert response.code == ResponseCode.SYSTEM_ERROR and "123456" in response.remark


async def test_a_retry_send_past_its_limit_goes_to_the_dlq(cluster, producer):
    """The SDK's fallback (and orderly consumers) send to %RETRY%<group> themselves."""
    for times, topic in ((2, "%RETRY%g6"), (3, "%DLQ%g6")):
        ext = {"producerGroup": "p", "topic": "%RETRY%g6", "defaultTopic": "TBW102",
               "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0, "bornTimestamp": 0, "flag": 0,
               "properties": "DELAY\x011\x02", "reconsumeTimes": times, "maxReconsumeTimes": 2}  # fmt: skip
        response = await cluster.call(RequestCode.SEND_MESSAGE, ext, body=f"r{times}".encode())
        assert response.code == ResponseCode.SUCCESS, response.remark
        [(_, m)] = await collect(cluster.namesrv_addr, topic, 1, group=f"reader{times}")
        assert m.body == f"r{times}".encode()
