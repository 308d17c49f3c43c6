"""Declarations against the store, on SQLite and PostgreSQL: RabbitMQ's answers (the texts below are
what RabbitMQ 3.10.8 answered to the same declarations), and the per-vhost change log."""

import pytest

from ferrymq.meta.entities import CLUSTER_SCOPE, Binding, Exchange, Permission, Policy, Queue, Vhost, decode
from ferrymq.meta.errors import AccessRefused, CommandInvalid, NotFound, PreconditionFailed, ResourceLocked


def queue(name="q", **fields):
    return Queue(vhost="/", name=name, **fields)


def exchange(name="x", **fields):
    return Exchange(vhost="/", name=name, **fields)


def refused(error_type, call, *args, **kwargs):
    with pytest.raises(error_type) as caught:
        call(*args, **kwargs)
    return caught.value.reply_text


def test_queue_equivalence_errors_are_rabbitmqs(store):
    declared = store.declare_queue(queue(arguments={"x-message-ttl": 1000}))
    assert declared.topic == "AMQP-_2f-q" and declared.group == "AMQP_GID-_2f-q"
    assert store.declare_queue(queue(arguments={"x-message-ttl": 1000, "other": 1})) == declared
    assert refused(
        PreconditionFailed, store.declare_queue, queue(durable=False, arguments=declared.arguments)
    ) == (
        "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q' in vhost '/': "
        "received 'false' but current is 'true'"
    )
    assert refused(PreconditionFailed, store.declare_queue, queue(auto_delete=True)) == (
        "PRECONDITION_FAILED - inequivalent arg 'auto_delete' for queue 'q' in vhost '/': "
        "received 'true' but current is 'false'"
    )
    assert refused(PreconditionFailed, store.declare_queue, queue(arguments={"x-message-ttl": 2000})) == (
        "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': "
        "received '2000' but current is '1000'"
    )
    assert refused(PreconditionFailed, store.declare_queue, queue()) == (
        "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': "
        "received none but current is the value '1000' of type 'signedint'"
    )
    assert refused(
        PreconditionFailed, store.declare_queue, queue(arguments={"x-message-ttl": 1000, "x-max-length": 5})
    ) == (
        "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in vhost '/': "
        "received the value '5' of type 'signedint' but current is none"
    )
    assert refused(
        ResourceLocked, store.declare_queue, queue(exclusive_owner="c1", arguments=declared.arguments)
    ) == (
        "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'q' in vhost '/'. It could be "
        "originally declared on another connection or the exclusive property value does not match that "
        "of the original declaration."
    )


def test_exchange_equivalence_errors_are_rabbitmqs(store):
    store.declare_exchange(exchange())
    assert store.declare_exchange(exchange(arguments={"foo": 1})) == exchange()
    prefix = "PRECONDITION_FAILED - inequivalent arg"
    assert refused(PreconditionFailed, store.declare_exchange, exchange(type="fanout")) == (
        f"{prefix} 'type' for exchange 'x' in vhost '/': received 'fanout' but current is 'direct'"
    )
    assert refused(PreconditionFailed, store.declare_exchange, exchange(durable=False)) == (
        f"{prefix} 'durable' for exchange 'x' in vhost '/': received 'false' but current is 'true'"
    )
    assert refused(PreconditionFailed, store.declare_exchange, exchange(internal=True)) == (
        f"{prefix} 'internal' for exchange 'x' in vhost '/': received 'true' but current is 'false'"
    )
    assert refused(
        PreconditionFailed, store.declare_exchange, exchange(arguments={"alternate-exchange": "ae"})
    ) == (
        f"{prefix} 'alternate-exchange' for exchange 'x' in vhost '/': "
        "received the value 'ae' of type 'longstr' but current is none"
    )
    assert refused(CommandInvalid, store.declare_exchange, exchange("x2", type="nosuch")) == (
        "COMMAND_INVALID - unknown exchange type 'nosuch'"
    )


def test_reserved_names_passive_declares_and_missing_things(store):
    assert refused(AccessRefused, store.declare_exchange, exchange("amq.foo")) == (
        "ACCESS_REFUSED - exchange name 'amq.foo' contains reserved prefix 'amq.*'"
    )
    assert refused(AccessRefused, store.declare_queue, queue("amq.foo")) == (
        "ACCESS_REFUSED - queue name 'amq.foo' contains reserved prefix 'amq.*'"
    )
    default = "ACCESS_REFUSED - operation not permitted on the default exchange"
    assert refused(AccessRefused, store.declare_exchange, exchange("")) == default
    assert refused(AccessRefused, store.bind, Binding(vhost="/", source="", destination="q")) == default
    assert store.declare_exchange(exchange("amq.topic"), passive=True).type == "topic"
    assert store.declare_exchange(exchange(""), passive=True).type == "direct"
    assert refused(NotFound, store.declare_queue, queue("none"), passive=True) == (
        "NOT_FOUND - no queue 'none' in vhost '/'"
    )
    assert refused(NotFound, store.declare_exchange, exchange("none"), passive=True) == (
        "NOT_FOUND - no exchange 'none' in vhost '/'"
    )
    store.declare_queue(queue())
    store.declare_exchange(exchange())
    assert refused(NotFound, store.bind, Binding(vhost="/", source="x", destination="none")) == (
        "NOT_FOUND - no queue 'none' in vhost '/'"
    )
    assert refused(NotFound, store.bind, Binding(vhost="/", source="none", destination="q")) == (
        "NOT_FOUND - no exchange 'none' in vhost '/'"
    )
    assert store.declare_queue(queue(durable=False), passive=True).durable  # passive ignores the rest
    store.unbind(Binding(vhost="/", source="x", destination="q", routing_key="absent"))  # no error
    store.delete_queue("/", "none")
    store.delete_exchange("/", "none")


def test_server_named_and_exclusive_queues(store):
    named = store.declare_queue(queue("", exclusive_owner="conn-1", durable=False))
    assert named.name.startswith("amq.gen-")
    assert store.declare_queue(queue(named.name, exclusive_owner="conn-1"), passive=True) == named
    with pytest.raises(ResourceLocked):
        store.declare_queue(queue(named.name), passive=True)
    with pytest.raises(ResourceLocked):
        store.delete_queue("/", named.name, owner="conn-2")
    store.declare_queue(queue("shared"))
    assert store.delete_owned("conn-1") == [named]
    assert not store.exists("queue", "/", named.name) and store.exists("queue", "/", "shared")


def test_bindings_if_unused_and_auto_delete_exchanges(store):
    store.declare_queue(queue())
    store.declare_exchange(exchange())
    store.declare_exchange(exchange("auto", type="fanout", auto_delete=True))
    binding = Binding(vhost="/", source="x", destination="q", routing_key="k")
    assert store.bind(binding) == "created"
    assert store.bind(binding) == "unchanged"
    assert (
        store.bind(Binding(vhost="/", source="x", destination="q", routing_key="k", arguments={"a": 1}))
        == "created"
    )
    store.bind(Binding(vhost="/", source="auto", destination="x", destination_type="exchange"))
    assert refused(PreconditionFailed, store.delete_exchange, "/", "x", if_unused=True) == (
        "PRECONDITION_FAILED - exchange 'x' in vhost '/' in use"
    )
    assert refused(AccessRefused, store.delete_exchange, "/", "amq.direct") == (
        "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed"
    )
    store.delete_queue("/", "q")
    assert store.snapshot("/").bindings == [
        Binding(vhost="/", source="auto", destination="x", destination_type="exchange")
    ]
    store.delete_exchange("/", "x")  # its last binding as destination goes, and so does "auto"
    assert not store.exists("exchange", "/", "auto")
    assert store.snapshot("/").bindings == []


def test_every_change_bumps_the_vhost_version_and_is_logged(store):
    start = store.version("/")
    assert start > 0  # the default exchanges and guest's permission
    store.declare_queue(queue())
    store.declare_queue(queue())  # equivalent: no change
    store.declare_exchange(exchange())
    store.bind(Binding(vhost="/", source="x", destination="q"))
    store.put_policy(
        Policy(vhost="/", name="ttl", pattern="^q$", apply_to="queues", definition={"message-ttl": 5})
    )
    changes = store.changes("/", start)
    assert [(c.version, c.kind, c.op) for c in changes.changes] == [
        (start + 1, "queue", "put"),
        (start + 2, "exchange", "put"),
        (start + 3, "binding", "put"),
        (start + 4, "policy", "put"),
    ]
    assert changes.version == store.version("/") == start + 4
    assert decode(changes.changes[0]) == store.snapshot("/").queues[0]
    assert store.changes("/", start + 4).changes == []
    assert store.changes("/", start + 99).reset
    assert store.changes("/", start, limit=2).version == start + 2


def test_vhosts_users_and_permissions(store):
    assert store.put_vhost(Vhost(name="eu")) == "created"
    assert store.put_vhost(Vhost(name="eu")) == "unchanged"
    assert {x.name for x in store.snapshot("eu").exchanges} >= {"", "amq.direct", "amq.topic"}
    store.set_permission(Permission(user="guest", vhost="eu", configure="^$"))
    assert store.permission("guest", "eu").configure == "^$"
    store.declare_queue(Queue(vhost="eu", name="q"))
    assert store.declare_queue(Queue(vhost="eu", name="q")).topic == "AMQP-eu-q"
    cluster = store.version(CLUSTER_SCOPE)
    store.delete_vhost("eu")
    assert [c.kind for c in store.changes(CLUSTER_SCOPE, cluster).changes] == ["vhost"]
    assert store.changes("eu", 0).changes[-1].kind == "vhost"
    assert refused(NotFound, store.declare_queue, Queue(vhost="eu", name="q")) == "NOT_FOUND - no vhost 'eu'"
    assert store.permission("guest", "eu") is None
    deleted_at = store.version("eu")
    store.put_vhost(Vhost(name="eu"))
    assert store.version("eu") > deleted_at  # a watcher's version stays meaningful
    store.delete_user("guest")
    assert store.user("guest") is None and store.permission("guest", "/") is None
