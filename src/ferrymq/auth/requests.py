"""Which resources and actions a remoting request needs (RocketMQ's DefaultAuthorizationContextBuilder
and the ``@RocketMQAction`` marks of its request headers).

A request on a retry topic (``%RETRY%<group>``) is a consumer's: it needs Sub on the group rather than
the topic. Requests not listed need only a signed request (as RocketMQ: a code without a mark is
authenticated, not authorised). Most codes' needs follow from one or two extFields alone, which
``NEEDS`` names, so that a checker can remember its decision by their values.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass

from ferrymq.auth.model import Action, Resource
from ferrymq.protocol.bodies import HeartbeatData, SubscriptionGroupConfig, decode_body
from ferrymq.protocol.codes import RequestCode as C
from ferrymq.protocol.pop import RETRY_PREFIX
from ferrymq.protocol.remoting import RemotingCommand, RemotingProtocolError

Need = tuple[Resource, frozenset[Action]]

_PUB = frozenset({Action.PUB})
_SUB = frozenset({Action.SUB})
_SUB_GET = frozenset({Action.SUB, Action.GET})
_SUB_UPDATE = frozenset({Action.SUB, Action.UPDATE})
_ROUTE = frozenset({Action.PUB, Action.SUB, Action.GET})
_CREATE = frozenset({Action.CREATE, Action.UPDATE})
_UPDATE = frozenset({Action.UPDATE})
_DELETE = frozenset({Action.DELETE})
_GET = frozenset({Action.GET})
_LIST = frozenset({Action.LIST})


class RequestNotUnderstood(ValueError):
    """A request whose fields say too little to decide on (e.g. a send without a topic)."""


def _field(fields: dict[str, str], name: str) -> str:
    value = fields.get(name)
    if not value:
        raise RequestNotUnderstood(f"the request has no {name}")
    return str(value)


@functools.lru_cache(maxsize=65536)  # topics are few: a hot send should not build its resource anew
def _topic_or_retry_group(topic: str, actions: frozenset[Action]) -> Need:
    if topic.startswith(RETRY_PREFIX):
        return Resource.group(topic[len(RETRY_PREFIX) :]), _SUB
    return Resource.topic(topic), actions


@dataclass(frozen=True, slots=True)
class Needs:
    """How one request code's needs are found: ``of(request)``."""

    of: Callable[[RemotingCommand], list[Need]]
    picked: Callable[[dict[str, str]], object] | None
    """The values of the extFields that alone decide them (KeyError when one is missing); None when
    the body does too."""


def _picking(*names: str) -> Callable[[dict[str, str]], object]:
    """One C call per request (operator.itemgetter) where there are fields to pick."""
    return operator.itemgetter(*names) if names else (lambda fields: ())


def _topic(name: str, actions: frozenset[Action]) -> Needs:
    return Needs(lambda r: [_topic_or_retry_group(_field(r.ext_fields, name), actions)], _picking(name))


def _group(name: str, actions: frozenset[Action]) -> Needs:
    return Needs(lambda r: [(Resource.group(_field(r.ext_fields, name)), actions)], _picking(name))


def _cluster(actions: frozenset[Action]) -> Needs:
    return Needs(lambda r: [(Resource.cluster(), actions)], _picking())


def _topic_and_group(topic: str, group: str, actions: frozenset[Action]) -> Needs:
    def needs(request: RemotingCommand) -> list[Need]:
        fields = request.ext_fields
        out = [(Resource.group(_field(fields, group)), actions)]
        name = _field(fields, topic)
        if not name.startswith(RETRY_PREFIX):
            out.append((Resource.topic(name), actions))
        return out

    return Needs(needs, _picking(topic, group))


def _optional_topic(request: RemotingCommand) -> list[Need]:
    """END_TRANSACTION: Pub on its topic, which only 5.x peers send."""
    topic = request.ext_fields.get("topic")
    return [(Resource.topic(str(topic)), _PUB)] if topic else []


def _heartbeat(request: RemotingCommand) -> list[Need]:
    """Sub on every consumer group the heartbeat announces and on each of their topics."""
    try:
        data = decode_body(HeartbeatData, request.body)
    except RemotingProtocolError as e:
        raise RequestNotUnderstood(f"heartbeat body: {e}") from None
    out: list[Need] = []
    for consumer in data.consumer_data_set:
        out.append((Resource.group(consumer.group_name), _SUB))
        out += [
            (Resource.topic(s.topic), _SUB)
            for s in consumer.subscription_data_set
            if not s.topic.startswith(RETRY_PREFIX)
        ]
    return out


def _subscription_group(request: RemotingCommand) -> list[Need]:
    try:
        group = decode_body(SubscriptionGroupConfig, request.body).group_name
    except RemotingProtocolError as e:
        raise RequestNotUnderstood(f"subscription group body: {e}") from None
    return [(Resource.group(group), _CREATE)]


NEEDS: dict[int, Needs] = {
    C.GET_ROUTEINFO_BY_TOPIC: _topic("topic", _ROUTE),
    C.SEND_MESSAGE: _topic("topic", _PUB),
    C.SEND_MESSAGE_V2: _topic("b", _PUB),
    C.SEND_BATCH_MESSAGE: _topic("b", _PUB),
    C.SEND_REPLY_MESSAGE: _topic("topic", _PUB),
    C.SEND_REPLY_MESSAGE_V2: _topic("b", _PUB),
    C.END_TRANSACTION: Needs(_optional_topic, _picking("topic")),
    C.RECALL_MESSAGE: _topic("topic", _PUB),
    C.CONSUMER_SEND_MSG_BACK: _group("group", _SUB),
    C.PULL_MESSAGE: _topic_and_group("topic", "consumerGroup", _SUB),
    C.LITE_PULL_MESSAGE: _topic_and_group("topic", "consumerGroup", _SUB),
    C.POP_MESSAGE: _topic_and_group("topic", "consumerGroup", _SUB),
    C.ACK_MESSAGE: _topic_and_group("topic", "consumerGroup", _SUB),
    C.CHANGE_MESSAGE_INVISIBLETIME: _topic_and_group("topic", "consumerGroup", _SUB),
    C.QUERY_MESSAGE: _topic("topic", _SUB_GET),
    C.HEART_BEAT: Needs(_heartbeat, None),
    C.GET_CONSUMER_LIST_BY_GROUP: _group("consumerGroup", _SUB_GET),
    C.QUERY_CONSUMER_OFFSET: _topic_and_group("topic", "consumerGroup", _SUB_GET),
    C.UPDATE_CONSUMER_OFFSET: _topic_and_group("topic", "consumerGroup", _SUB_UPDATE),
    # Administration: topics, groups, configuration, brokers, users and rules.
    C.UPDATE_AND_CREATE_TOPIC: _topic("topic", _CREATE),
    C.UPDATE_AND_CREATE_TOPIC_LIST: _cluster(_CREATE),
    C.DELETE_TOPIC_IN_BROKER: _topic("topic", _DELETE),
    C.DELETE_TOPIC_IN_NAMESRV: _topic("topic", _DELETE),
    C.GET_TOPIC_CONFIG: _topic("topic", _GET),
    C.GET_ALL_TOPIC_CONFIG: _cluster(_LIST),
    C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: _cluster(_LIST),
    C.GET_TOPICS_BY_CLUSTER: _cluster(_LIST),
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: Needs(_subscription_group, None),
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST: _cluster(_CREATE),
    C.DELETE_SUBSCRIPTIONGROUP: _group("groupName", _DELETE),
    C.GET_SUBSCRIPTIONGROUP_CONFIG: _group("group", _GET),
    C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: _cluster(_LIST),
    C.INVOKE_BROKER_TO_RESET_OFFSET: _group("group", _UPDATE),
    C.RESET_CONSUMER_OFFSET_IN_BROKER: _group("group", _UPDATE),
    C.UPDATE_BROKER_CONFIG: _cluster(_UPDATE),
    C.GET_BROKER_CONFIG: _cluster(_GET),
    C.UPDATE_NAMESRV_CONFIG: _cluster(_UPDATE),
    C.GET_NAMESRV_CONFIG: _cluster(_GET),
    C.PUT_KV_CONFIG: _cluster(_UPDATE),
    C.DELETE_KV_CONFIG: _cluster(_UPDATE),
    C.REGISTER_BROKER: _cluster(_UPDATE),
    C.UNREGISTER_BROKER: _cluster(_UPDATE),
    C.BROKER_HEARTBEAT: _cluster(_UPDATE),
    C.REGISTER_TOPIC_IN_NAMESRV: _cluster(_UPDATE),
    C.WIPE_WRITE_PERM_OF_BROKER: _cluster(_UPDATE),
    C.ADD_WRITE_PERM_OF_BROKER: _cluster(_UPDATE),
    C.TRIGGER_DELETE_FILES: _cluster(_UPDATE),
    C.CLEAN_EXPIRED_CONSUMEQUEUE: _cluster(_UPDATE),
    C.CLEAN_UNUSED_TOPIC: _cluster(_UPDATE),
    C.DELETE_EXPIRED_COMMITLOG: _cluster(_UPDATE),
    C.AUTH_CREATE_USER: _cluster(_UPDATE),
    C.AUTH_UPDATE_USER: _cluster(_UPDATE),
    C.AUTH_DELETE_USER: _cluster(_UPDATE),
    C.AUTH_GET_USER: _cluster(_GET),
    C.AUTH_LIST_USER: _cluster(_GET),
    C.AUTH_CREATE_ACL: _cluster(_UPDATE),
    C.AUTH_UPDATE_ACL: _cluster(_UPDATE),
    C.AUTH_DELETE_ACL: _cluster(_UPDATE),
    C.AUTH_GET_ACL: _cluster(_GET),
    C.AUTH_LIST_ACL: _cluster(_GET),
    C.QUOTA_SET: _cluster(_UPDATE),
    C.QUOTA_DELETE: _cluster(_UPDATE),
    C.QUOTA_LIST: _cluster(_GET),
}


def needs(request: RemotingCommand) -> list[Need]:
    """What ``request`` needs; empty when its code needs only a valid signature.

    Raises RequestNotUnderstood when the fields it is judged by are missing or do not parse."""
    how = NEEDS.get(request.code)
    return [] if how is None else how.of(request)
