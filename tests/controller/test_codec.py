"""The controller protocol's headers and bodies: round trips, and garbage never escapes as a crash."""

from __future__ import annotations

import contextlib

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.protocol import controller as c
from ferrymq.protocol.bodies import Body, decode_body, encode_body
from ferrymq.protocol.headers import CustomHeader
from ferrymq.protocol.remoting import RemotingProtocolError

HEADERS = [
    v
    for v in vars(c).values()
    if isinstance(v, type) and issubclass(v, CustomHeader) and v is not CustomHeader
]
BODIES = [v for v in vars(c).values() if isinstance(v, type) and issubclass(v, Body) and v is not Body]


def test_java_field_names():
    header = c.AlterSyncStateSetRequestHeader("broker-a", 1, 3, invoke_time=7)
    assert header.to_ext_fields() == {
        "brokerName": "broker-a", "masterBrokerId": "1", "masterEpoch": "3", "invokeTime": "7"
    }  # fmt: skip
    assert c.GetMetaDataResponseHeader(is_leader=True).to_ext_fields() == {"isLeader": "true"}
    java = b'{"syncStateSet":[1,2],"syncStateSetEpoch":4}'
    assert decode_body(c.SyncStateSet, java) == c.SyncStateSet({1, 2}, 4)
    table = decode_body(
        c.BrokerReplicasInfo,
        b'{"replicasInfoTable":{"b":{"masterBrokerId":1,"masterAddress":"h:1","masterEpoch":2,'
        b'"syncStateSetEpoch":3,"inSyncReplicas":[{"brokerName":"b","brokerId":1,"brokerAddress":"h:1",'
        b'"alive":true}],"notInSyncReplicas":[]}}}',
    )
    assert table.replicas_info_table["b"].in_sync_replicas[0].alive
    group = c.BrokerMemberGroup("c", "b", {1: "h:1"})
    assert decode_body(c.BrokerMemberGroup, encode_body(group)) == group


JSON_OBJECTS = st.dictionaries(
    st.sampled_from(
        ["syncStateSet", "syncStateSetEpoch", "brokerAddrs", "replicasInfoTable", "masterBrokerId"]
    ),
    st.one_of(st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3), st.none()),
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(HEADERS),
    st.dictionaries(
        st.text(max_size=30), st.one_of(st.text(max_size=20), st.integers(), st.booleans(), st.none())
    ),
)
def test_garbage_headers_raise_only_protocol_errors(cls, ext):
    with contextlib.suppress(RemotingProtocolError):
        cls.from_ext_fields(ext)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(BODIES), st.one_of(st.binary(max_size=200), st.builds(msgspec.json.encode, JSON_OBJECTS))
)
def test_garbage_bodies_raise_only_protocol_errors(cls, data):
    with contextlib.suppress(RemotingProtocolError):
        decode_body(cls, data)
