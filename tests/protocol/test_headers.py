"""Custom headers: coercion, mandatory fields, unknown fields, SEND_MESSAGE_V2 letters, round trips."""

import contextlib

import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.protocol import headers
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.headers import (
    REQUEST_HEADERS,
    CustomHeader,
    GetMaxOffsetRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    ResetOffsetRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
)
from ferrymq.protocol.remoting import RemotingProtocolError

ALL_HEADERS = sorted(
    (
        value
        for value in vars(headers).values()
        if isinstance(value, type) and issubclass(value, CustomHeader) and value is not CustomHeader
    ),
    key=lambda cls: cls.__name__,
)

SEND = SendMessageRequestHeader(
    producer_group="PG",
    topic="T",
    default_topic="TBW102",
    default_topic_queue_nums=4,
    queue_id=2,
    sys_flag=0,
    born_timestamp=1700000000000,
    flag=0,
    properties="KEYS\x01k\x02TAGS\x01a\x02",
    batch=True,
)


def test_cpp_client_send_header_with_mixed_numbers_and_acl_fields():
    ext = {
        "producerGroup": "PG",
        "topic": "T",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": "2",
        "sysFlag": 0,
        "bornTimestamp": "1700000000000",
        "flag": 0,
        "properties": "KEYS\x01k\x02TAGS\x01a\x02",
        "reconsumeTimes": 0,
        "unitMode": False,
        "batch": "true",
        "AccessKey": "ak",
        "Signature": "sig",
        "OnsChannel": "ALIYUN",
    }
    assert SendMessageRequestHeader.from_ext_fields(ext) == SEND


def test_strings_are_coerced_to_declared_types():
    header = PullMessageRequestHeader.from_ext_fields(
        {
            "consumerGroup": "G",
            "topic": "T",
            "queueId": "0",
            "queueOffset": "9223372036854775807",
            "maxMsgNums": "32",
            "sysFlag": "6",
            "commitOffset": "-1",
            "suspendTimeoutMillis": "15000",
            "subVersion": "1",
            "subscription": "*",
        }
    )
    assert header.queue_offset == 2**63 - 1
    assert (header.max_msg_nums, header.sys_flag, header.commit_offset) == (32, 6, -1)
    assert header.expression_type is None
    assert (
        QueryConsumerOffsetRequestHeader.from_ext_fields(
            {"consumerGroup": "G", "topic": "T", "queueId": "1", "setZeroIfNotFound": "FALSE"}
        ).set_zero_if_not_found
        is False
    )


def test_a_number_for_a_string_field_is_stringified():
    assert UnregisterClientRequestHeader.from_ext_fields({"clientID": 12345}).client_id == "12345"


def test_missing_mandatory_field_is_named():
    ext = SEND.to_ext_fields()
    del ext["bornTimestamp"]
    with pytest.raises(RemotingProtocolError, match=r"SendMessageRequestHeader.*bornTimestamp"):
        SendMessageRequestHeader.from_ext_fields(ext)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("queueId", "zero"),
        ("queueId", "2147483648"),
        ("batch", "maybe"),
        ("bornTimestamp", ""),
        ("flag", "1e99"),
    ],
)
def test_bad_value_is_named(field, value):
    ext = {**SEND.to_ext_fields(), field: value}
    with pytest.raises(RemotingProtocolError, match=field):
        SendMessageRequestHeader.from_ext_fields(ext)


def test_unknown_and_5x_extra_fields_are_ignored():
    ext = {
        "topic": "T",
        "queueId": "3",
        "ns": "namespace",
        "nsd": "false",
        "oway": "true",
        "lo": "false",
        "somethingNew": "x",
    }
    assert GetMaxOffsetRequestHeader.from_ext_fields(ext) == GetMaxOffsetRequestHeader(topic="T", queue_id=3)


def test_java_defaults_apply_to_absent_optional_fields():
    assert GetMaxOffsetRequestHeader(topic="T", queue_id=0).committed is True
    reset = ResetOffsetRequestHeader.from_ext_fields(
        {"group": "G", "topic": "T", "timestamp": "0", "isForce": "true"}
    )
    assert (reset.queue_id, reset.offset, reset.is_force) == (-1, None, True)


def test_to_ext_fields_stringifies_and_skips_none():
    header = PullMessageResponseHeader(
        suggest_which_broker_id=0, next_begin_offset=5, min_offset=0, max_offset=5
    )
    assert header.to_ext_fields() == {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": "5",
        "minOffset": "0",
        "maxOffset": "5",
    }
    response = SendMessageResponseHeader(msg_id="ID", queue_id=1, queue_offset=7, msg_region="DefaultRegion")
    response.trace_on = True
    assert response.to_ext_fields() == {
        "msgId": "ID",
        "queueId": "1",
        "queueOffset": "7",
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
    }
    assert SEND.to_ext_fields()["unitMode"] == "false"
    assert "maxReconsumeTimes" not in SEND.to_ext_fields()


def test_send_message_v2_letters_map_to_the_same_struct():
    v2 = {
        "a": "PG",
        "b": "T",
        "c": "TBW102",
        "d": "4",
        "e": "2",
        "f": "0",
        "g": "1700000000000",
        "h": "0",
        "i": "KEYS\x01k\x02TAGS\x01a\x02",
        "j": "0",
        "k": "false",
        "m": "true",
        "n": "broker-a",
    }
    header = SendMessageRequestHeader.from_ext_fields(v2)
    assert header.broker_name == "broker-a"
    header.broker_name = None
    assert header == SEND
    assert SEND.to_ext_fields_v2() == {key: value for key, value in v2.items() if key != "n"}
    with pytest.raises(RemotingProtocolError, match="bornTimestamp"):
        SendMessageRequestHeader.from_ext_fields({k: v for k, v in v2.items() if k != "g"})


def test_a_frame_is_read_by_one_key_set_only_as_rocketmq_reads_it():
    """SEND_MESSAGE_V2's letters win over every long name beside them (``n`` over ``bname``), and a
    frame without ``a`` is read by its long names, a stray letter ignored."""
    v2 = SEND.to_ext_fields_v2() | {"n": "broker-a"}
    mixed = {"producerGroup": "Other", "topic": "Elsewhere", "bname": "broker-z", **v2}
    header = SendMessageRequestHeader.from_ext_fields(mixed)
    assert (header.producer_group, header.topic, header.broker_name) == ("PG", "T", "broker-a")
    assert SendMessageRequestHeader.from_ext_fields({**v2, "bname": "broker-z"}).broker_name == "broker-a"
    without_n = {k: v for k, v in v2.items() if k != "n"} | {"bname": "broker-z"}
    assert SendMessageRequestHeader.from_ext_fields(without_n).broker_name is None
    v1 = SEND.to_ext_fields() | {"b": "Elsewhere", "bname": "broker-b"}
    header = SendMessageRequestHeader.from_ext_fields(v1)
    assert (header.topic, header.broker_name) == ("T", "broker-b")
    with pytest.raises(RemotingProtocolError, match="bornTimestamp"):  # a V2 frame's error names the field
        SendMessageRequestHeader.from_ext_fields({**mixed, "g": "soon", "bornTimestamp": "1"})


V2_VALUES = st.one_of(
    st.sampled_from(["0", "4", "-1", "2147483648", "true", "false", "x", "", "1.5", " 7"]),
    st.text(max_size=4),
    st.integers(-(2**64), 2**64),
    st.booleans(),
    st.none(),
)


INT_TEXT = st.integers(-(2**31), 2**31 - 1).map(str)
VALID_V2 = st.fixed_dictionaries(
    {"a": st.text(max_size=3), "b": st.text(max_size=3), "c": st.text(max_size=3), "d": INT_TEXT},
    optional={"e": INT_TEXT, "f": INT_TEXT, "g": st.integers(-(2**63), 2**63 - 1).map(str), "h": INT_TEXT},
).map(lambda ext: {**ext, **dict.fromkeys("efgh", "0") | ext})  # every mandatory one, mostly valid


@settings(max_examples=400)
@given(
    VALID_V2
    | st.fixed_dictionaries({"a": st.text(max_size=3)}, optional=dict.fromkeys("bcdefghijklmn", V2_VALUES))
    | st.tuples(VALID_V2, st.dictionaries(st.sampled_from("ijklmn"), V2_VALUES)).map(lambda t: t[0] | t[1]),
    st.dictionaries(st.sampled_from(["zzz", "AccessKey", "bname"]), st.text(max_size=3), max_size=2),
)
def test_send_message_v2_letters_read_as_the_long_names_are(v2, extra):
    """The letters are read in one step; the letters renamed to long names (and nothing else: a V2
    frame's long names, bname among them, are not read) are the reference."""
    ext = {**v2, **extra}
    long = {headers._V2_TO_LONG[key]: value for key, value in ext.items() if key in headers._V2_TO_LONG}

    def read(read_header, ext):
        try:
            return read_header(ext)
        except ProtocolError as e:
            return str(e)

    reference = read(lambda ext: CustomHeader.from_ext_fields.__func__(SendMessageRequestHeader, ext), long)
    assert read(SendMessageRequestHeader.from_ext_fields, ext) == reference


def test_registry_covers_the_core_requests():
    for code in (
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.PULL_MESSAGE,
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.REGISTER_BROKER,
        RequestCode.PUT_KV_CONFIG,
        RequestCode.GET_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.END_TRANSACTION,
    ):
        assert issubclass(REQUEST_HEADERS[code], CustomHeader)
    assert all(code in iter(RequestCode) for code in REQUEST_HEADERS)


# --- Properties over every header class -------------------------------------------------------


def value_strategy(info: mi.Type) -> st.SearchStrategy:
    if isinstance(info, mi.UnionType):
        return st.one_of([value_strategy(member) for member in info.types])
    if isinstance(info, mi.NoneType):
        return st.none()
    if isinstance(info, mi.BoolType):
        return st.booleans()
    if isinstance(info, mi.IntType):
        return st.integers(info.ge, info.le)
    assert isinstance(info, mi.StrType), info
    return st.text()


def instances(cls: type[CustomHeader]) -> st.SearchStrategy:
    fields = {f.name: value_strategy(f.type) for f in mi.type_info(cls).fields}
    return st.fixed_dictionaries(fields).map(lambda values: cls(**values))


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=lambda cls: cls.__name__)
@settings(max_examples=40)
@given(data=st.data())
def test_every_header_round_trips(cls, data):
    header = data.draw(instances(cls))
    ext = header.to_ext_fields()
    assert all(type(value) is str for value in ext.values())
    assert cls.from_ext_fields(ext) == header


EXT_VALUES = st.one_of(st.text(max_size=8), st.integers(), st.booleans(), st.none(), st.floats())


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=lambda cls: cls.__name__)
@settings(max_examples=40)
@given(data=st.data())
def test_garbage_ext_fields_only_raise_protocol_errors(cls, data):
    names = [f.encode_name for f in msgspec.structs.fields(cls)] + ["a", "g", "zzz"]
    keys = st.sampled_from(names) | st.text(max_size=4)
    ext = data.draw(st.dictionaries(keys, EXT_VALUES, max_size=len(names)))
    with contextlib.suppress(ProtocolError):
        cls.from_ext_fields(ext)
