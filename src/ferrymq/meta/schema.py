"""The tables (SQLAlchemy Core), the same on SQLite and PostgreSQL. Records are rows of plain
columns with their AMQP arguments and policy definitions as JSON; every change bumps its scope's row
in `scopes` and appends to `changes`, so watchers read the log in version order."""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Column, Index, Integer, MetaData, String, Table, Text, UniqueConstraint

metadata = MetaData()
NAME = 255  # AMQP short strings: exchange, queue and vhost names are at most 255 bytes

scopes = Table(
    "meta_scopes",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("version", Integer, nullable=False),
)

vhosts = Table(
    "meta_vhosts",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("description", Text, nullable=False),
    Column("tags", JSON, nullable=False),
)

users = Table(
    "meta_users",
    metadata,
    Column("name", String(NAME), primary_key=True),
    Column("password_hash", Text, nullable=False),
    Column("hashing_algorithm", String(64), nullable=False),
    Column("tags", JSON, nullable=False),
)

permissions = Table(
    "meta_permissions",
    metadata,
    Column("user", String(NAME), primary_key=True),
    Column("vhost", String(NAME), primary_key=True),
    Column("configure", Text, nullable=False),
    Column("write", Text, nullable=False),
    Column("read", Text, nullable=False),
)

exchanges = Table(
    "meta_exchanges",
    metadata,
    Column("vhost", String(NAME), primary_key=True),
    Column("name", String(NAME), primary_key=True),
    Column("type", String(NAME), nullable=False),
    Column("durable", Boolean, nullable=False),
    Column("auto_delete", Boolean, nullable=False),
    Column("internal", Boolean, nullable=False),
    Column("arguments", JSON, nullable=False),
)

queues = Table(
    "meta_queues",
    metadata,
    Column("vhost", String(NAME), primary_key=True),
    Column("name", String(NAME), primary_key=True),
    Column("durable", Boolean, nullable=False),
    Column("auto_delete", Boolean, nullable=False),
    Column("exclusive_owner", String(NAME), nullable=True),
    Column("arguments", JSON, nullable=False),
    Column("topic", String(127), nullable=False, unique=True),
    Column("group", String(NAME), nullable=False, unique=True),
)

bindings = Table(
    "meta_bindings",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("vhost", String(NAME), nullable=False),
    Column("source", String(NAME), nullable=False),
    Column("destination", String(NAME), nullable=False),
    Column("destination_type", String(16), nullable=False),
    Column("routing_key", String(NAME), nullable=False),
    Column("arguments", JSON, nullable=False),
    # the canonical JSON of `arguments`: bindings that differ only in arguments are different bindings
    Column("arguments_key", Text, nullable=False),
    UniqueConstraint("vhost", "source", "destination_type", "destination", "routing_key", "arguments_key"),
    Index("meta_bindings_by_destination", "vhost", "destination_type", "destination"),
)

policies = Table(
    "meta_policies",
    metadata,
    Column("vhost", String(NAME), primary_key=True),
    Column("name", String(NAME), primary_key=True),
    Column("pattern", Text, nullable=False),
    Column("apply_to", String(16), nullable=False),
    Column("definition", JSON, nullable=False),
    Column("priority", Integer, nullable=False),
)

changes = Table(
    "meta_changes",
    metadata,
    Column("scope", String(NAME), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("op", String(8), nullable=False),
    Column("value", JSON, nullable=False),
)
