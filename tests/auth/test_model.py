"""The pure parts: resources, rules, decisions and request signatures."""

from __future__ import annotations

import contextlib
import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferrymq.auth import (
    Acl,
    Action,
    AuthModelError,
    AuthRegistry,
    Decision,
    PolicyEntry,
    Resource,
    User,
    UserType,
)
from ferrymq.auth.decision import decide, source_address
from ferrymq.auth.gate import RemotingGate
from ferrymq.auth.registry import AuthError
from ferrymq.protocol.acl_signing import (
    Credentials,
    PySigningKey,
    SigningKey,
    grpc_authorization,
    grpc_signature_matches,
    request_content,
    signature,
)
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.remoting import RemotingCommand

names = st.text(
    st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="*:,"), min_size=1, max_size=20
)
action_sets = st.frozensets(st.sampled_from(list(Action)), min_size=1)
LOCAL = ipaddress.ip_address("127.0.0.1")


def entry(resource: str, actions: str, decision: str = "Allow", ips: list[str] | None = None) -> PolicyEntry:
    return PolicyEntry.from_json(
        {"resource": resource, "actions": actions.split(","), "decision": decision, "sourceIps": ips}
    )


def test_resources_parse_as_rocketmq_writes_them():
    assert Resource.parse("Topic:orders") == Resource.topic("orders")
    assert Resource.parse("Topic:order-*") == Resource(Resource.topic("x").type, "order-", prefix=True)
    assert str(Resource.parse("Group:g1")) == "Group:g1"
    assert str(Resource.parse("Cluster")) == "Cluster" == str(Resource.parse("Cluster:DefaultCluster"))
    assert str(Resource.parse("*")) == "*"
    for bad in ("", "Topic", "Topic:", "Queue:x", None, 5, "Any:x"):
        with pytest.raises(AuthModelError):
            Resource.parse(bad)


@given(names, st.booleans())
def test_resource_text_round_trips(name, prefix):
    resource = Resource.parse(f"Topic:{name}{'*' if prefix else ''}")
    assert Resource.parse(str(resource)) == resource


@given(names, names)
def test_prefix_covers_exactly_the_names_it_starts(prefix, name):
    rule = Resource.parse(f"Topic:{prefix}*")
    assert rule.covers(Resource.topic(name)) == name.startswith(prefix)
    assert not rule.covers(Resource.group(name))
    assert Resource.parse("*").covers(Resource.group(name))
    assert Resource.parse("Topic:*").covers(Resource.topic(name))


def test_rules_allow_deny_and_default_deny():
    alice = User("alice", "pw")
    rules = [entry("Topic:order-*", "Pub,Sub"), entry("Topic:order-secret", "Sub", "Deny")]
    assert decide(alice, rules, Resource.topic("order-1"), frozenset({Action.PUB}), LOCAL) is Decision.ALLOW
    assert (
        decide(alice, rules, Resource.topic("order-secret"), frozenset({Action.SUB}), LOCAL) is Decision.DENY
    )
    assert (
        decide(alice, rules, Resource.topic("order-secret"), frozenset({Action.PUB}), LOCAL) is Decision.ALLOW
    )
    assert decide(alice, rules, Resource.topic("payments"), frozenset({Action.PUB}), LOCAL) is Decision.DENY
    assert decide(alice, [], Resource.cluster(), frozenset({Action.UPDATE}), LOCAL) is Decision.DENY
    everything = [entry("*", "All")]
    assert decide(alice, everything, Resource.group("g"), frozenset({Action.DELETE}), LOCAL) is Decision.ALLOW


def test_source_ranges():
    alice = User("alice", "pw")
    rules = [entry("Topic:t", "Pub", ips=["10.0.0.0/8", "192.168.1.7"])]
    pub = frozenset({Action.PUB})
    assert decide(alice, rules, Resource.topic("t"), pub, ipaddress.ip_address("10.2.3.4")) is Decision.ALLOW
    assert (
        decide(alice, rules, Resource.topic("t"), pub, ipaddress.ip_address("192.168.1.7")) is Decision.ALLOW
    )
    assert (
        decide(alice, rules, Resource.topic("t"), pub, ipaddress.ip_address("192.168.1.8")) is Decision.DENY
    )
    assert decide(alice, rules, Resource.topic("t"), pub, None) is Decision.DENY
    assert source_address("10.1.2.3:5555") == ipaddress.ip_address("10.1.2.3")
    assert source_address("[::1]:5555") == ipaddress.ip_address("::1")
    assert source_address("?") is None
    with pytest.raises(AuthModelError, match="CIDR"):
        entry("Topic:t", "Pub", ips=["10.0.0.0/99"])


def test_the_most_specific_matching_rule_decides_as_in_rocketmq():
    """RocketMQ 5 sorts the matching entries (literal, longer prefix, shorter prefix, every one of a
    type, ``*``; deny first among equals) and takes the first one's decision."""
    alice = User("alice", "secret")
    sub = frozenset({Action.SUB})

    def decision(*rules) -> Decision:
        return decide(alice, list(rules), Resource.topic("order-paid"), sub, LOCAL)

    assert decision(entry("Topic:*", "Sub", "Deny"), entry("Topic:order-paid", "Sub")) is Decision.ALLOW
    assert decision(entry("Topic:order-*", "Sub"), entry("Topic:order-paid", "Sub", "Deny")) is Decision.DENY
    assert decision(entry("Topic:o*", "Sub", "Deny"), entry("Topic:order-*", "Sub")) is Decision.ALLOW
    assert decision(entry("Topic:order-*", "Sub", "Deny"), entry("Topic:o*", "Sub")) is Decision.DENY
    assert decision(entry("*", "Sub", "Deny"), entry("Topic:*", "Sub")) is Decision.ALLOW
    assert decision(entry("Topic:order-*", "Sub"), entry("Topic:order-*", "Sub", "Deny")) is Decision.DENY


@given(
    st.lists(st.tuples(names, action_sets, st.sampled_from(list(Decision))), max_size=6), names, action_sets
)
def test_deny_wins_between_equals_and_super_users_may_do_everything(rules, topic, wanted):
    entries = [PolicyEntry(Resource.topic(t), a, d) for t, a, d in rules]
    normal = decide(User("u", "p"), entries, Resource.topic(topic), wanted, LOCAL)
    matching = [e for e in entries if e.matches(Resource.topic(topic), wanted, LOCAL)]
    expected = (
        Decision.ALLOW if matching and all(e.decision is Decision.ALLOW for e in matching) else Decision.DENY
    )
    assert normal is expected
    assert (
        decide(User("s", "p", UserType.SUPER), entries, Resource.topic(topic), wanted, LOCAL)
        is Decision.ALLOW
    )


def test_users_and_acls_json_shapes():
    user = User.from_json({"username": "bob", "password": "s3", "userType": "Super", "userStatus": "disable"})
    assert user.to_json(with_password=False) == {
        "username": "bob",
        "userType": "Super",
        "userStatus": "disable",
    }
    acl = Acl.from_json(
        {"subject": "User:bob", "policies": [{"policyType": "Custom", "entries": [
            {"resource": "Topic:t", "actions": ["Pub", "sub"], "sourceIps": ["10.0.0.0/8"],
             "decision": "Deny"}
        ]}]}
    )  # fmt: skip
    assert Acl.from_json(acl.to_json()) == acl
    for bad in (
        {},
        {"username": "x"},
        {"password": "x"},
        {"username": "x", "password": "y", "userType": "Root"},
    ):
        with pytest.raises(AuthModelError):
            User.from_json(bad)
    with pytest.raises(AuthModelError, match="Action"):
        entry("Topic:t", "Publish")


def test_registry_changes_and_snapshot():
    registry = AuthRegistry()
    assert registry.ensure_super_user("root", "rootpw")
    assert not registry.ensure_super_user("root", "other")
    registry.create_user(User("alice", "a"))
    with pytest.raises(AuthModelError):
        registry.create_user(User("alice", "again"))
    registry.put_acl(Acl("alice", (entry("Topic:a", "Pub"),)), replace=False)
    registry.put_acl(Acl("alice", (entry("Topic:b", "Sub"), entry("Topic:a", "Sub"))), replace=False)
    assert {str(e.resource): e.actions for e in registry.acls["alice"].entries} == {
        "Topic:a": {Action.SUB},
        "Topic:b": {Action.SUB},
    }
    with pytest.raises(LookupError):
        registry.put_acl(Acl("nobody", (entry("Topic:a", "Pub"),)), replace=False)
    registry.update_user({"userStatus": "disable"}, "alice")
    with pytest.raises(AuthError, match="disabled"):
        registry.user_for("alice")
    copy = AuthRegistry()
    copy.restore(registry.snapshot())
    assert copy.users == registry.users and copy.acls == registry.acls
    registry.delete_acl("alice", Resource.topic("a"))
    assert [str(e.resource) for e in registry.acls["alice"].entries] == ["Topic:b"]
    registry.delete_user("alice")
    assert "alice" not in registry.acls


def test_a_remembered_decision_goes_with_the_rule_that_made_it():
    registry = AuthRegistry()
    alice = User("alice", "a")
    registry.create_user(alice)
    registry.put_acl(Acl("alice", (entry("Topic:a", "Pub"),)), replace=False)
    pub = frozenset({Action.PUB})
    registry.authorize(alice, Resource.topic("a"), pub, LOCAL)
    registry.authorize(alice, Resource.topic("a"), pub, LOCAL)  # remembered
    registry.put_acl(Acl("alice", (entry("Topic:a", "Pub", "Deny"),)), replace=False)
    with pytest.raises(AuthError, match="no permission"):
        registry.authorize(alice, Resource.topic("a"), pub, LOCAL)
    registry.delete_acl("alice", Resource.topic("a"))
    with pytest.raises(AuthError, match="no permission"):  # no rule: denied, not the old allow
        registry.authorize(alice, Resource.topic("a"), pub, LOCAL)


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.create_user(User("bob", "b")),
        lambda r: r.update_user({"password": "new"}, "alice"),
        lambda r: r.delete_user("alice"),
        lambda r: r.put_acl(Acl("alice", (entry("Topic:b", "Pub"),)), replace=False),
        lambda r: r.delete_acl("alice", None),
        lambda r: r.ensure_super_user("root", "rootpw"),
        lambda r: r.restore(r.snapshot()),
        lambda r: r.create_user(User("alice", "again")),  # a change refused half-way forgets too
    ],
)
def test_every_change_of_users_or_rules_forgets_what_was_decided(change):
    registry = AuthRegistry()
    registry.create_user(User("alice", "a"))
    registry.put_acl(Acl("alice", (entry("Topic:a", "Pub"),)), replace=False)
    registry.authorize(registry.users["alice"], Resource.topic("a"), frozenset({Action.PUB}), LOCAL)
    request = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields={"a": "g", "b": "a"}, body=b"x")
    Credentials("alice", "a").sign(request)
    assert RemotingGate(registry)("127.0.0.1:4000", request) is None
    assert len(registry.decided) == 1 and len(registry.signers["alice"].decided) == 1
    told: list[int] = []
    registry.listeners.append(lambda: told.append(registry.version))
    with contextlib.suppress(AuthModelError):
        change(registry)
    assert registry.decided == {} and registry.signers == {}  # the signer's decisions go with it
    assert told == [registry.version]  # listeners hear of it once, after it


def test_the_gate_decides_per_peer_and_forgets_on_a_change():
    """A rule bound to a source range: the same signed send is allowed from inside it and refused
    from outside, each time (the remembered decision is the peer's own), until the rules change."""
    registry = AuthRegistry()
    registry.create_user(User("alice", "a"))
    registry.put_acl(Acl("alice", (entry("Topic:t", "Pub", ips=["10.0.0.0/8"]),)), replace=False)
    gate = RemotingGate(registry)
    request = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields={"a": "g", "b": "t"}, body=b"x")
    Credentials("alice", "a").sign(request)
    for _ in range(2):
        assert gate("10.1.2.3:4000", request) is None
        refusal = gate("192.168.0.1:4000", request)
        assert refusal is not None and "no permission" in (refusal.remark or "")
    other = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields={"a": "g", "b": "u"}, body=b"x")
    Credentials("alice", "a").sign(other)
    assert gate("10.1.2.3:4000", other) is not None  # another topic: another decision
    registry.put_acl(Acl("alice", (entry("Topic:t", "Pub"),)), replace=True)
    assert gate("192.168.0.1:4000", request) is None
    registry.put_acl(Acl("alice", (entry("Topic:t", "Pub", "Deny"),)), replace=True)
    assert gate("10.1.2.3:4000", request) is not None
    registry.put_acl(Acl("alice", (entry("Topic:t", "Pub"),)), replace=True)
    registry.update_user({"password": "b"}, "alice")  # signed with the old secret: refused from now
    refusal = gate("10.1.2.3:4000", request)
    assert refusal is not None and refusal.remark == "check signature failed"
    Credentials("alice", "b").sign(request)
    assert gate("10.1.2.3:4000", request) is None
    registry.update_user({"userStatus": "disable"}, "alice")
    refusal = gate("10.1.2.3:4000", request)
    assert refusal is not None and "disabled" in (refusal.remark or "")
    registry.update_user({"userStatus": "enable"}, "alice")
    assert gate("10.1.2.3:4000", request) is None
    for fields, body in (({**request.ext_fields, "b": "u"}, b"x"), (request.ext_fields, b"y")):
        tampered = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields=dict(fields), body=body)
        refusal = gate("10.1.2.3:4000", tampered)
        assert refusal is not None and refusal.remark == "check signature failed"
    del tampered.ext_fields["Signature"]
    refusal = gate("10.1.2.3:4000", tampered)
    assert refusal is not None and refusal.remark == "No signature is configured"


def test_signed_content_whatever_the_order_of_the_fields():
    """The values follow the sorted keys however a peer orders them, alone or with others."""
    assert request_content({"b": "2", "a": "1", "Signature": "s"}, b"!", 479) == b"12!"
    assert request_content({"a": "1", "b": "2"}, b"", 479) == b"12"
    assert request_content({"AccessKey": "ak", "Signature": "s"}, b"", 479) == b"ak"
    assert request_content({"Signature": "s"}, b"body", 479) == b"body"
    assert request_content({"n": 7, "m": 8}, b"", 479) == b"87"  # not strings yet: printed


def test_signature_is_rocketmqs():
    """Values of the sorted extFields but Signature, then the body, HMAC-SHA1 keyed by the secret, base64."""
    request = RemotingCommand(10, ext_fields={"topic": "T", "b": "2", "a": "1"}, body=b"xyz", version=479)
    Credentials("ak", "sk").sign(request)
    assert request.ext_fields["AccessKey"] == "ak"
    assert request_content(request.ext_fields, request.body, 479) == b"ak12Txyz"
    assert request.ext_fields["Signature"] == signature(b"ak12Txyz", "sk")
    # A known value, computed independently: printf 'ak12Txyz' | openssl dgst -sha1 -hmac sk -binary | base64
    assert signature(b"ak12Txyz", "sk") == "zKcHGoAfO3nUBVK0X14dpzaCHwY="
    old = {"_UNIQUE_KEY_QUERY": "true", "AccessKey": "ak"}
    assert request_content(old, b"", 63) == b"ak"
    assert request_content(old, b"", 479) == b"aktrue"
    assert "sk" not in repr(Credentials("ak", "sk"))


def test_registry_authenticates_signed_requests_only():
    registry = AuthRegistry()
    registry.create_user(User("alice", "secret"))
    request = RemotingCommand(10, ext_fields={"topic": "T"}, body=b"hello")
    Credentials("alice", "secret").sign(request)
    assert registry.authenticate(request.ext_fields, request.body, request.version).username == "alice"
    with pytest.raises(AuthError, match="signature"):
        registry.authenticate(request.ext_fields, b"hellO", request.version)
    with pytest.raises(AuthError, match="signature"):
        registry.authenticate({**request.ext_fields, "topic": "U"}, request.body, request.version)
    with pytest.raises(AuthError, match="not found"):
        registry.authenticate({**request.ext_fields, "AccessKey": "mallory"}, request.body, request.version)
    with pytest.raises(AuthError, match="accessKey"):
        registry.authenticate({"topic": "T"}, b"", request.version)


def test_grpc_authorization_header():
    date = "20260101T000000Z"
    import hashlib
    import hmac

    sig = hmac.new(b"sk", date.encode(), hashlib.sha1).hexdigest().upper()
    header = f"MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature={sig}"
    assert grpc_authorization(header) == ("ak", sig)
    assert grpc_signature_matches(sig, date, "sk")
    assert not grpc_signature_matches(sig, date, "other")
    assert grpc_authorization("Basic abc") is None
    assert grpc_authorization("MQv2-HMAC-SHA1 Credential=ak") is None


@given(st.text(max_size=100), st.binary(max_size=300), st.binary(max_size=3000))
def test_signature_is_hmac_sha1_whatever_the_key(secret, content, body):
    """The precomputed-pad HMAC equals the standard library's for keys shorter and longer than a block."""
    import base64
    import hashlib
    import hmac

    expected = base64.b64encode(hmac.new(secret.encode(), content + body, hashlib.sha1).digest()).decode()
    assert signature(content, secret, body) == expected  # the C version where it is built
    py_mac = PySigningKey(secret.encode()).mac(content, memoryview(body))  # its Python reference
    assert base64.b64encode(py_mac).decode() == expected


ext_field_maps = st.dictionaries(
    st.one_of(
        st.text(max_size=20), st.sampled_from(["Signature", "_UNIQUE_KEY_QUERY", "AccessKey", "a", "b"])
    ),
    st.text(max_size=1500),  # past the C version's gathering buffer too
    max_size=40,  # past its room for fields on the stack too
)


@given(ext_field_maps, st.binary(max_size=2000), st.sampled_from([398, 399, 400, 500]), st.text(max_size=80))
def test_request_signature_in_c_equals_the_python_reference(fields, body, version, secret):
    """Hashing the values in place (ferrymq/_native/hmac.c) signs what joining them in the order
    of the sorted keys signs, for old and new peers, any str keys and values, any size; each
    checks the fields' own Signature, and only the right one."""
    key, reference = SigningKey(secret.encode()), PySigningKey(secret.encode())
    try:
        expected = reference.sign(fields, body, version)
    except UnicodeEncodeError:  # a lone surrogate: neither can encode it
        with pytest.raises(UnicodeEncodeError):
            key.sign(fields, body, version)
        return
    assert key.sign(fields, memoryview(body), version) == expected
    signed = {**fields, "Signature": expected}
    assert key.verify(signed, body, version) and reference.verify(signed, memoryview(body), version)
    flipped = expected[:-2] + ("A" if expected[-2] != "A" else "B") + expected[-1]
    for wrong in (flipped, expected[:-1], expected + "=", "é" * 28, "", 5, None):
        signed["Signature"] = wrong
        assert not key.verify(signed, body, version)
        assert not reference.verify(signed, body, version)
    del signed["Signature"]
    assert not key.verify(signed, body, version) and not reference.verify(signed, body, version)


def test_request_signature_prints_values_that_are_not_strings_as_java_would():
    fields = {"queueId": 3, "topic": "T", "unitMode": "false"}
    expected = signature(b"3Tfalse", "sk", b"body")
    for key in (SigningKey(b"sk"), PySigningKey(b"sk")):
        assert key.sign(fields, b"body", 400) == expected  # type: ignore[arg-type]
        assert key.verify({**fields, "Signature": expected}, b"body", 400)  # type: ignore[arg-type]
