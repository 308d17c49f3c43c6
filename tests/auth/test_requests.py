"""What each remoting request needs (RocketMQ's mapping of request codes to resources and actions)."""

from __future__ import annotations

import pytest

from ferrymq.auth.model import Action
from ferrymq.auth.requests import RequestNotUnderstood, needs
from ferrymq.protocol.bodies import (
    ConsumerData,
    HeartbeatData,
    SubscriptionData,
    SubscriptionGroupConfig,
    encode_body,
)
from ferrymq.protocol.codes import RequestCode as Req
from ferrymq.protocol.remoting import RemotingCommand


def wanted(code: int, body: bytes = b"", **fields: str) -> dict[str, set[str]]:
    """Resource → the actions (any of which will do) the request needs on it."""
    request = RemotingCommand(code, ext_fields=fields, body=body)
    return {str(r): {a.value for a in actions} for r, actions in needs(request)}


def test_sends_pulls_and_retry_topics():
    assert wanted(Req.SEND_MESSAGE_V2, b="orders") == {"Topic:orders": {"Pub"}}
    assert wanted(Req.SEND_MESSAGE, topic="%RETRY%billing") == {"Group:billing": {"Sub"}}
    assert wanted(Req.PULL_MESSAGE, topic="orders", consumerGroup="billing") == {
        "Group:billing": {"Sub"},
        "Topic:orders": {"Sub"},
    }
    assert wanted(Req.PULL_MESSAGE, topic="%RETRY%billing", consumerGroup="billing") == {
        "Group:billing": {"Sub"}
    }
    assert wanted(Req.GET_ROUTEINFO_BY_TOPIC, topic="t") == {"Topic:t": {"Pub", "Sub", "Get"}}
    assert wanted(Req.END_TRANSACTION) == {}  # 4.x peers send no topic: authenticated only
    with pytest.raises(RequestNotUnderstood):
        needs(RemotingCommand(Req.SEND_MESSAGE_V2, ext_fields={}))


def test_bodies_and_admin_codes():
    heartbeat = HeartbeatData(
        client_id="c",
        consumer_data_set=[
            ConsumerData(
                group_name="billing",
                subscription_data_set=[
                    SubscriptionData(topic="orders"),
                    SubscriptionData(topic="%RETRY%billing"),
                ],
            )
        ],
    )
    assert wanted(Req.HEART_BEAT, encode_body(heartbeat)) == {
        "Group:billing": {"Sub"},
        "Topic:orders": {"Sub"},
    }
    group = encode_body(SubscriptionGroupConfig("billing"))
    assert wanted(Req.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, group) == {"Group:billing": {"Create", "Update"}}
    assert wanted(Req.DELETE_TOPIC_IN_BROKER, topic="t") == {"Topic:t": {"Delete"}}
    assert wanted(Req.AUTH_CREATE_USER) == {"Cluster": {"Update"}}
    assert wanted(Req.AUTH_LIST_ACL) == {"Cluster": {"Get"}}
    assert wanted(Req.GET_ALL_TOPIC_CONFIG) == {"Cluster": {"List"}}
    assert wanted(Req.GET_BROKER_RUNTIME_INFO) == {}
    with pytest.raises(RequestNotUnderstood):
        needs(RemotingCommand(Req.HEART_BEAT, body=b"not json"))
    assert Action.ALL.value == "All"
