"""Trace records: RocketMQ's exact layout, the older short forms, round trips and garbage."""

import contextlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.trace import (
    EndTransactionRecord,
    MessageType,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceDecodeError,
    TransactionState,
    decode_records,
    encode_record,
    encode_records,
    record_keys,
)

MSG_ID = "AC11000100002A9F0000000000000001"
PUB = PubRecord(
    timestamp=1700000000123, region_id="DefaultRegion", group="pg", topic="T", msg_id=MSG_ID, tags="TagA",
    keys="k1 k2", store_host="127.0.0.1:10911", body_length=5, cost_time=3,
    msg_type=MessageType.NORMAL, offset_msg_id="7F00000100002A9F0000000000000000", success=True,
)  # fmt: skip


def test_pub_is_written_field_for_field_like_rocketmq():
    assert encode_record(PUB) == (
        "Pub\x011700000000123\x01DefaultRegion\x01pg\x01T\x01AC11000100002A9F0000000000000001"
        "\x01TagA\x01k1 k2\x01127.0.0.1:10911\x015\x013\x010\x017F00000100002A9F0000000000000000\x01true\x02"
    )


def test_sub_before_sub_after_and_end_transaction_layouts():
    before = SubBeforeRecord(
        timestamp=5, region_id="r", group="cg", request_id="req", msg_id="m", retry_times=2, keys=""
    )
    after = SubAfterRecord(
        request_id="req",
        msg_id="m",
        cost_time=7,
        success=False,
        keys="",
        context_code=1,
        timestamp=9,
        group="cg",
    )
    end = EndTransactionRecord(
        timestamp=5, region_id="r", group="pg", topic="T", msg_id="m", tags="", keys="k", store_host="h:1",
        msg_type=MessageType.TRANS_HALF, transaction_id="tx", transaction_state=TransactionState.UNKNOW,
        from_transaction_check=True,
    )  # fmt: skip
    assert encode_record(before) == "SubBefore\x015\x01r\x01cg\x01req\x01m\x012\x01\x02"
    assert encode_record(after) == "SubAfter\x01req\x01m\x017\x01false\x01\x011\x019\x01cg\x02"
    assert (
        encode_record(end)
        == "EndTransaction\x015\x01r\x01pg\x01T\x01m\x01\x01k\x01h:1\x011\x01tx\x01UNKNOW\x01true\x02"
    )
    assert decode_records(encode_records([before, after, end, PUB])) == [before, after, end, PUB]


def test_older_short_forms_are_read_like_rocketmq_reads_them():
    old_pub = "Pub\x011\x01r\x01g\x01T\x01m\x01t\x01k\x01h\x014\x012\x013\x01true\x02"
    assert decode_records(old_pub)[0].offset_msg_id == ""
    assert decode_records(old_pub)[0].msg_type is MessageType.DELAY
    with_client_host = (
        "Pub\x011\x01r\x01g\x01T\x01m\x01t\x01k\x01h\x014\x012\x010\x01off\x01TRUE\x01client\x02"
    )
    assert decode_records(with_client_host)[0].offset_msg_id == "off"
    assert decode_records(with_client_host)[0].success is True
    old_after = decode_records(b"SubAfter\x01req\x01m\x017\x01true\x01k\x02")[0]
    assert (old_after.context_code, old_after.timestamp, old_after.group) == (0, 0, "")
    assert decode_records(b"SubAfter\x01req\x01m\x017\x01true\x01k\x010\x0112\x02")[0].timestamp == 12


def test_unknown_types_and_empty_pieces_are_skipped():
    body = "Recall\x011\x01r\x01g\x01T\x01m\x01true\x02\x02" + encode_record(PUB)
    assert decode_records(body) == [PUB]
    assert decode_records(b"") == []


def test_keys_are_msg_id_then_business_keys():
    assert record_keys(PUB) == [PUB.msg_id, "k1", "k2"]
    assert record_keys(SubAfterRecord(request_id="r", msg_id="m", cost_time=0, success=True, keys="")) == [
        "m"
    ]


def test_separator_inside_a_field_is_refused():
    with pytest.raises(ValueError, match="must not contain"):
        encode_record(
            SubBeforeRecord(
                timestamp=1, region_id="r", group="g", request_id="x", msg_id="m\x01", retry_times=0, keys=""
            )
        )
    with pytest.raises(ValueError):
        encode_record(
            SubBeforeRecord(
                timestamp=1,
                region_id="r",
                group="g",
                request_id="x",
                msg_id="m",
                retry_times=0,
                keys="a\x02b",
            )
        )


@pytest.mark.parametrize(
    "body",
    [
        b"Pub\x01x\x01r\x01g\x01T\x01m\x01t\x01k\x01h\x014\x012\x010\x01true\x02",  # timestamp not a number
        b"Pub\x011\x01r\x02",  # too few fields
        b"Pub\x011\x01r\x01g\x01T\x01m\x01t\x01k\x01h\x014\x012\x019\x01true\x02",  # msgType ordinal 9
        b"EndTransaction\x011\x01r\x01g\x01T\x01m\x01t\x01k\x01h\x011\x01tx\x01MAYBE\x01true\x02",
        b"SubBefore\x011\x01r\x01g\x01q\x01m\x01\xd9\xa3\x01k\x02",  # non-ASCII digit
        b"\xff\xfe",
        b"SubBefore\x011\x01r\x01g\x01q\x01m\x011_000\x01k\x02",
    ],
)
def test_malformed_bodies_raise_trace_decode_error(body):
    with pytest.raises(TraceDecodeError):
        decode_records(body)


text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20)
BY_TYPE = {
    str: text,
    int: st.integers(-(2**63), 2**63 - 1),
    bool: st.booleans(),
    MessageType: st.sampled_from(MessageType),
    TransactionState: st.sampled_from(TransactionState),
}


def record_strategy(cls):
    return st.builds(cls, **{f.name: BY_TYPE[f.type] for f in msgspec.structs.fields(cls)})


records = st.one_of(*map(record_strategy, [PubRecord, SubBeforeRecord, SubAfterRecord, EndTransactionRecord]))


@settings(max_examples=300)
@given(st.lists(records, max_size=6))
def test_round_trip(batch):
    assert decode_records(encode_records(batch)) == batch


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_garbage_bytes_raise_only_protocol_errors(data):
    with contextlib.suppress(ProtocolError):
        decode_records(data)


separated = st.lists(
    st.one_of(
        st.sampled_from(["Pub", "SubBefore", "SubAfter", "EndTransaction", "true", "1", "-3", ""]), text
    ),
    max_size=16,
).map("\x01".join)


@settings(max_examples=500)
@given(st.lists(separated, max_size=4).map("\x02".join))
def test_record_shaped_garbage_raises_only_protocol_errors(body):
    with contextlib.suppress(ProtocolError):
        decode_records(body)
