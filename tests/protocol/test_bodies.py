"""JSON bodies: the shapes Java and the C++ client send, fastjson's unquoted keys, and garbage."""

import contextlib
import json

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ferrymq.protocol import bodies
from ferrymq.protocol.bodies import (
    Body,
    BrokerData,
    ClusterInfo,
    ConsumerData,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    QueueData,
    RegisterBrokerBody,
    TopicConfig,
    TopicList,
    TopicRouteData,
    UnlockBatchRequestBody,
    decode_body,
    encode_body,
)
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.remoting import RemotingProtocolError

ALL_BODIES = sorted(
    (v for v in vars(bodies).values() if isinstance(v, type) and issubclass(v, Body) and v is not Body),
    key=lambda cls: cls.__name__,
)

ROUTE = TopicRouteData(
    queue_datas=[QueueData("broker-a", read_queue_nums=4, write_queue_nums=4, perm=6)],
    broker_datas=[
        BrokerData(
            "broker-a", cluster="DefaultCluster", broker_addrs={0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
        )
    ],
)


def test_route_is_standard_json_with_quoted_keys():
    data = encode_body(ROUTE)
    assert json.loads(data)["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}
    assert decode_body(TopicRouteData, data) == ROUTE


def test_java_route_for_new_clients():
    data = (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},"brokerName":"broker-a",'
        b'"cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},'
        b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
    )
    assert decode_body(TopicRouteData, data) == ROUTE


def test_fastjson_unquoted_integer_keys():
    data = (
        b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911", 1 :"10.0.0.2:10911"},"brokerName":"broker-a",'
        b'"cluster":"DefaultCluster"}],"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,'
        b'"writeQueueNums":4}]}'
    )
    assert decode_body(TopicRouteData, data) == ROUTE
    cluster = decode_body(
        ClusterInfo,
        b'{"brokerAddrTable":{"b":{"brokerAddrs":{0:"h:1",-1:"h:2"},"brokerName":"b"}},'
        b'"clusterAddrTable":{"c":["b"]}}',
    )
    assert cluster.broker_addr_table["b"].broker_addrs == {0: "h:1", -1: "h:2"}
    assert cluster.cluster_addr_table == {"c": ["b"]}


@settings(max_examples=200)
@example(name='x",{0:"\\', addrs={1: ',2:"{3:', -4: "}"}, space="")
@given(
    st.text(),
    st.dictionaries(st.integers(-(2**63), 2**63 - 1), st.text(), max_size=5),
    st.sampled_from(["", " ", "\n\t"]),
)
def test_unquoted_keys_never_touch_string_contents(name, addrs, space):
    # Names and addresses may themselves contain things like `{0:` or `,1:` or escaped quotes.
    entries = ",".join(f"{space}{key}{space}:{json.dumps(value)}" for key, value in addrs.items())
    data = f'{{"brokerDatas":[{{"brokerName":{json.dumps(name)},"brokerAddrs":{{{entries}}}}}]}}'
    route = decode_body(TopicRouteData, data.encode())
    assert route.broker_datas == [BrokerData(name, broker_addrs=addrs)]


def test_cpp_client_heartbeat_with_enum_ordinals_and_string_numbers():
    data = (
        b'{"clientID":"1234-10.0.0.5@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,'
        b'"groupName":"G","messageModel":1,"subscriptionDataSet":[{"subString":"*","subVersion":"1700000000000",'
        b'"topic":"T"},{"subString":"*","subVersion":"1700000000001","topic":"%RETRY%G"}]}],'
        b'"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}'
    )
    heartbeat = decode_body(HeartbeatData, data)
    assert heartbeat.client_id == "1234-10.0.0.5@DEFAULT"
    (consumer,) = heartbeat.consumer_data_set
    assert (consumer.consume_type, consumer.message_model, consumer.consume_from_where) == (
        "CONSUME_PASSIVELY",
        "CLUSTERING",
        "CONSUME_FROM_LAST_OFFSET",
    )
    assert [s.sub_version for s in consumer.subscription_data_set] == [1700000000000, 1700000000001]
    assert consumer.subscription_data_set[0].expression_type == "TAG"
    assert heartbeat.producer_data_set[0].group_name == "CLIENT_INNER_PRODUCER"


def test_java_heartbeat_with_enum_names():
    data = (
        b'{"clientID":"c","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET",'
        b'"consumeType":"CONSUME_ACTIVELY","groupName":"G","messageModel":"BROADCASTING",'
        b'"subscriptionDataSet":[{"classFilterMode":false,"codeSet":[65],"expressionType":"TAG",'
        b'"subString":"A","subVersion":1,"tagsSet":["A"],"topic":"T"}],"unitMode":false}],'
        b'"heartbeatFingerprint":0,"producerDataSet":[],"withoutSub":false}'
    )
    (consumer,) = decode_body(HeartbeatData, data).consumer_data_set
    assert consumer.consume_type == "CONSUME_ACTIVELY"
    assert consumer.message_model == "BROADCASTING"
    assert consumer.subscription_data_set[0].code_set == [65]


def test_unknown_enum_ordinal_is_rejected():
    with pytest.raises(RemotingProtocolError, match="ordinal 9"):
        decode_body(HeartbeatData, b'{"clientID":"c","consumerDataSet":[{"groupName":"G","messageModel":9}]}')
    assert ConsumerData("G", consume_type=2).consume_type == "CONSUME_POP"


def test_lock_bodies():
    data = (
        b'{"clientId":"c","consumerGroup":"G","mqSet":[{"brokerName":"b","queueId":0,"topic":"T"},'
        b'{"brokerName":"b","queueId":1,"topic":"T"}],"onlyThisBroker":false}'
    )
    lock = decode_body(LockBatchRequestBody, data)
    assert set(lock.mq_set) == {MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)}
    assert decode_body(UnlockBatchRequestBody, data).mq_set == lock.mq_set
    response = LockBatchResponseBody(lock_ok_mq_set=[MessageQueue("T", "b", 1)])
    assert encode_body(response) == b'{"lockOKMQSet":[{"topic":"T","brokerName":"b","queueId":1}]}'
    assert decode_body(LockBatchResponseBody, encode_body(response)) == response


def test_register_broker_body_from_java():
    data = (
        b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,"stateVersion":0,'
        b'"timestamp":1700000000000},"mappingDataVersion":{"counter":0,"stateVersion":0,"timestamp":1},'
        b'"topicConfigTable":{"T":{"attributes":{},"order":false,"perm":6,"readQueueNums":8,'
        b'"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":8},'
        b'"TBW102":{"perm":7,"readQueueNums":8,"topicName":"TBW102","writeQueueNums":8}},'
        b'"topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{}}}'
    )
    wrapper = decode_body(RegisterBrokerBody, data).topic_config_serialize_wrapper
    assert wrapper.data_version.counter == 3
    assert wrapper.topic_config_table["T"] == TopicConfig("T", read_queue_nums=8, write_queue_nums=8)
    assert wrapper.topic_config_table["TBW102"].perm == 7


def test_missing_optional_fields_take_java_defaults():
    assert decode_body(TopicConfig, b'{"topicName":"T"}') == TopicConfig("T", 16, 16, 6)
    assert decode_body(TopicRouteData, b"{}") == TopicRouteData()
    assert decode_body(KVTable, b'{"table":{"k":"v"},"extra":[1,2]}') == KVTable({"k": "v"})


@pytest.mark.parametrize(
    "body",
    [
        TopicList(["a", "b"], broker_addr="h:1"),
        GetConsumerListByGroupResponseBody(["c1", "c2"]),
        ClusterInfo({"b": BrokerData("b", "c", {0: "h:1"})}, {"c": ["b"]}),
        RegisterBrokerBody(),
        ROUTE,
    ],
)
def test_round_trip(body):
    assert decode_body(type(body), encode_body(body)) == body


def test_field_names_are_rocketmq_camel_case():
    assert json.loads(encode_body(GetConsumerListByGroupResponseBody(["c"]))) == {"consumerIdList": ["c"]}
    assert set(json.loads(encode_body(HeartbeatData("c")))) == {
        "clientID",
        "producerDataSet",
        "consumerDataSet",
        "heartbeatFingerprint",
        "withoutSub",
    }


@pytest.mark.parametrize(
    ("cls", "data"),
    [
        (TopicRouteData, b""),
        (TopicRouteData, b"{"),
        (TopicRouteData, b"[]"),
        (TopicRouteData, b'{"queueDatas":{}}'),
        (TopicRouteData, b'{"queueDatas":[{"perm":6}]}'),  # brokerName is mandatory
        (TopicRouteData, b'{"brokerDatas":[{"brokerName":"b","brokerAddrs":{"x":"h"}}]}'),
        (HeartbeatData, b'{"clientID":"\xff"}'),
        (KVTable, b'{"table":{"k":1}}'),
        (KVTable, b'{"table":' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ],
)
def test_bad_bodies(cls, data):
    with pytest.raises(RemotingProtocolError, match=cls.__name__):
        decode_body(cls, data)


# --- Fuzzing: only ProtocolError may escape ---------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=12,
)
JSON_TEXT = JSON_VALUES.map(lambda value: msgspec.json.encode(value))


@st.composite
def mutated_valid_bodies(draw):
    data = bytearray(
        encode_body(draw(st.sampled_from([ROUTE, HeartbeatData("c", [bodies.ProducerData("p")])])))
    )
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        data[at : at + draw(st.integers(0, 2))] = draw(st.binary(max_size=3))
        if not data:
            break
    return bytes(data)


@pytest.mark.parametrize("cls", ALL_BODIES, ids=lambda cls: cls.__name__)
@settings(max_examples=60)
@given(data=st.one_of(st.binary(max_size=40), JSON_TEXT, mutated_valid_bodies()))
def test_garbage_only_raises_protocol_errors(cls, data):
    with contextlib.suppress(ProtocolError):
        decode_body(cls, data)


def test_reset_offset_body_round_trips_in_fastjson_object_key_form():
    from ferrymq.protocol.bodies import (
        MessageQueue,
        decode_reset_offset_body,
        encode_reset_offset_body,
        encode_reset_offset_body_for_c,
    )

    table = {MessageQueue("T", "broker-a", 0): 12, MessageQueue("T", "broker-a", 3): -1}
    raw = encode_reset_offset_body(table)
    assert raw.startswith(b'{"offsetTable":{{"topic":"T","brokerName":"broker-a","queueId":0}:12,')
    assert decode_reset_offset_body(raw) == table
    java = b'{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"U"}:7}}'  # as fastjson writes it
    assert decode_reset_offset_body(java) == {MessageQueue("U", "b", 1): 7}
    for_c = encode_reset_offset_body_for_c({MessageQueue("U", "b", 1): 7})  # what C++ clients read
    assert for_c == b'{"offsetTable":[{"topic":"U","brokerName":"b","queueId":1,"offset":7}]}'


@settings(max_examples=200)
@given(st.binary(max_size=200))
def test_reset_offset_body_decoder_raises_only_protocol_errors(data):
    from ferrymq.protocol.bodies import decode_reset_offset_body
    from ferrymq.protocol.errors import ProtocolError

    with contextlib.suppress(ProtocolError):
        decode_reset_offset_body(b'"offsetTable"' + data)
