"""Rows of the tables ↔ records: one function per direction, so the store speaks records only."""

from __future__ import annotations

import json
from typing import Any, TypeVar

import msgspec
from sqlalchemy import Row, Table

from ferrymq.meta import schema
from ferrymq.meta.entities import Binding, Entity, Exchange, Permission, Policy, Queue, User, Vhost

E = TypeVar("E", bound=Entity)

TABLE_OF: dict[type[Entity], Table] = {
    Vhost: schema.vhosts,
    User: schema.users,
    Permission: schema.permissions,
    Exchange: schema.exchanges,
    Queue: schema.queues,
    Binding: schema.bindings,
    Policy: schema.policies,
}


_KEYS: dict[type[Entity], tuple[str, ...]] = {
    Vhost: ("name",),
    User: ("name",),
    Permission: ("user", "vhost"),
    Exchange: ("vhost", "name"),
    Queue: ("vhost", "name"),
    Binding: ("vhost", "source", "destination_type", "destination", "routing_key", "arguments_key"),
    Policy: ("vhost", "name"),
}


def arguments_key(arguments: dict[str, Any]) -> str:
    """A canonical text of binding arguments, for the uniqueness of a binding."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"))


def to_row(entity: Entity) -> dict[str, Any]:
    row = msgspec.to_builtins(entity)
    if isinstance(entity, Binding):
        row["arguments_key"] = arguments_key(entity.arguments)
    return row


def key_of(entity: Entity) -> dict[str, Any]:
    """The primary (or, for bindings, unique) key of a record's row."""
    row = to_row(entity)
    return {name: row[name] for name in _KEYS[type(entity)]}


def from_row(cls: type[E], row: Row[Any]) -> E:
    return msgspec.convert(plain(row), cls)


def plain(row: Row[Any]) -> dict[str, Any]:
    """A row as a dict with plain str keys (SQLAlchemy's are a str subclass msgspec refuses), without
    the columns that only the database needs."""
    return {str(k): v for k, v in row._mapping.items() if k not in ("id", "arguments_key")}
