"""The metadata records, as they cross the API and HTTP (msgspec structs, JSON-ready). Names of
fields follow RabbitMQ's definitions where one exists."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Arguments = dict[str, Any]
CLUSTER_SCOPE = ""  # the change-log scope of vhosts and users (a vhost name is never empty)


class Vhost(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str = ""
    tags: list[str] = msgspec.field(default_factory=list)


class User(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    password_hash: str
    hashing_algorithm: str = "rabbit_password_hashing_sha256"
    tags: list[str] = msgspec.field(default_factory=list)


class Permission(msgspec.Struct, frozen=True, kw_only=True):
    user: str
    vhost: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


class Exchange(msgspec.Struct, frozen=True, kw_only=True):
    vhost: str
    name: str
    type: str = "direct"
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: Arguments = msgspec.field(default_factory=dict)


class Queue(msgspec.Struct, frozen=True, kw_only=True):
    """An AMQP queue; `topic` and `group` are its RocketMQ names (see naming.py), set by the store.
    `exclusive_owner` names the connection (gateway-scoped id) that owns an exclusive queue."""

    vhost: str
    name: str
    durable: bool = True
    auto_delete: bool = False
    exclusive_owner: str | None = None
    arguments: Arguments = msgspec.field(default_factory=dict)
    topic: str = ""
    group: str = ""


class Binding(msgspec.Struct, frozen=True, kw_only=True):
    vhost: str
    source: str
    destination: str
    destination_type: Literal["queue", "exchange"] = "queue"
    routing_key: str = ""
    arguments: Arguments = msgspec.field(default_factory=dict)


class Policy(msgspec.Struct, frozen=True, kw_only=True):
    vhost: str
    name: str
    pattern: str
    apply_to: Literal["all", "exchanges", "queues"] = "all"
    definition: Arguments = msgspec.field(default_factory=dict)
    priority: int = 0


Kind = Literal["vhost", "user", "permission", "exchange", "queue", "binding", "policy"]
Entity = Vhost | User | Permission | Exchange | Queue | Binding | Policy


class Change(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of a scope's change log: `value` is the new record ("put") or the removed one
    ("delete")."""

    scope: str
    version: int
    kind: Kind
    op: Literal["put", "delete"]
    value: dict[str, Any]


class Changes(msgspec.Struct, frozen=True, kw_only=True):
    """What a watch answers: the changes after `since` in order, and the scope's version they reach.
    `reset` says the caller's version is unknown here (newer than ours): reload a snapshot."""

    scope: str
    version: int
    changes: list[Change]
    reset: bool = False


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """Everything in one vhost at one version: where a gateway starts before it watches."""

    vhost: Vhost
    version: int
    exchanges: list[Exchange]
    queues: list[Queue]
    bindings: list[Binding]
    policies: list[Policy]
    permissions: list[Permission]


KIND_OF: dict[type[Entity], Kind] = {
    Vhost: "vhost",
    User: "user",
    Permission: "permission",
    Exchange: "exchange",
    Queue: "queue",
    Binding: "binding",
    Policy: "policy",
}
TYPE_OF: dict[Kind, type[Entity]] = {kind: cls for cls, kind in KIND_OF.items()}


def decode(change: Change) -> Entity:
    """The record a change carries, typed."""
    return msgspec.convert(change.value, TYPE_OF[change.kind])
