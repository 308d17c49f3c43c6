"""The metadata store: every operation is one database transaction that checks RabbitMQ's rules,
writes the records and appends its changes to the scope's log under the next versions. Synchronous
(SQLAlchemy Core on SQLite or PostgreSQL); MetaService runs it off the event loop.

Writers of one scope are serialized by locking the scope's row first (SELECT ... FOR UPDATE on
PostgreSQL; SQLite has one writer at a time, and a process lock keeps its threads in line), so that
"check, then write" holds across several metadata servers sharing a PostgreSQL database."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import msgspec
from sqlalchemy import Connection, Engine, delete, insert, select, update

from ferrymq.meta import equivalence, schema
from ferrymq.meta.access import hash_password
from ferrymq.meta.entities import (
    CLUSTER_SCOPE,
    KIND_OF,
    Binding,
    Change,
    Changes,
    Entity,
    Exchange,
    Permission,
    Policy,
    Queue,
    Snapshot,
    User,
    Vhost,
)
from ferrymq.meta.errors import AccessRefused, CommandInvalid, PreconditionFailed, not_found, resource
from ferrymq.meta.naming import queue_group, queue_topic
from ferrymq.meta.rows import TABLE_OF, from_row, key_of, plain, to_row

Outcome = Literal["created", "updated", "unchanged"]
EXCHANGE_TYPES = frozenset({"direct", "fanout", "topic", "headers"})
DEFAULT_EXCHANGES = (
    ("", "direct", False),
    ("amq.direct", "direct", False),
    ("amq.fanout", "fanout", False),
    ("amq.topic", "topic", False),
    ("amq.headers", "headers", False),
    ("amq.match", "headers", False),
    ("amq.rabbitmq.trace", "topic", True),
)
_DEFAULT_EXCHANGE = "operation not permitted on the default exchange"
_WATCH_LIMIT = 1000  # changes per watch answer; the caller asks again from the version it reached


class _Tx:
    """One write transaction on one scope: hands out the scope's next versions."""

    def __init__(self, conn: Connection, scope: str) -> None:
        self.conn = conn
        self.scope = scope
        row = conn.execute(
            select(schema.scopes.c.version).where(schema.scopes.c.name == scope).with_for_update()
        ).first()
        if row is None:
            conn.execute(insert(schema.scopes).values(name=scope, version=0))
        self.start = self.version = 0 if row is None else row.version

    def log(self, op: Literal["put", "delete"], entity: Entity) -> None:
        self.version += 1
        self.conn.execute(
            insert(schema.changes).values(
                scope=self.scope,
                version=self.version,
                kind=KIND_OF[type(entity)],
                op=op,
                value=msgspec.to_builtins(entity),
            )
        )

    def put(self, entity: Entity) -> Outcome:
        """Insert or replace the record with this key, logging it unless it is already so."""
        table = TABLE_OF[type(entity)]
        where = [table.c[k] == v for k, v in key_of(entity).items()]
        row = self.conn.execute(select(table).where(*where)).first()
        if row is not None and from_row(type(entity), row) == entity:
            return "unchanged"
        if row is None:
            self.conn.execute(insert(table).values(to_row(entity)))
        else:
            self.conn.execute(update(table).where(*where).values(to_row(entity)))
        self.log("put", entity)
        return "created" if row is None else "updated"

    def remove(self, entity: Entity) -> None:
        table = TABLE_OF[type(entity)]
        self.conn.execute(delete(table).where(*[table.c[k] == v for k, v in key_of(entity).items()]))
        self.log("delete", entity)

    def finish(self) -> None:
        if self.version != self.start:
            self.conn.execute(
                update(schema.scopes).where(schema.scopes.c.name == self.scope).values(version=self.version)
            )


class MetaStore:
    """RabbitMQ's metadata over SQLAlchemy; the tables are created on first use."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._local = threading.Lock() if engine.dialect.name == "sqlite" else None
        schema.metadata.create_all(engine)

    @contextmanager
    def _write(self, scope: str) -> Iterator[_Tx]:
        with self._local or _no_lock(), self.engine.begin() as conn:
            tx = _Tx(conn, scope)
            yield tx
            tx.finish()

    def _get(self, conn: Connection, cls: type[Any], **key: Any) -> Any:
        table = TABLE_OF[cls]
        row = conn.execute(select(table).where(*[table.c[k] == v for k, v in key.items()])).first()
        return None if row is None else from_row(cls, row)

    def _all(self, conn: Connection, cls: type[Any], **key: Any) -> list[Any]:
        table = TABLE_OF[cls]
        rows = conn.execute(select(table).where(*[table.c[k] == v for k, v in key.items()]))
        return [from_row(cls, row) for row in rows]

    # -- vhosts, users, permissions (the cluster scope; a vhost's contents log in its own scope) ---

    def ensure_defaults(self) -> bool:
        """On an empty store, what a fresh RabbitMQ has: vhost "/" and user guest/guest with every
        permission there. Whether it was empty."""
        with self.engine.connect() as conn:
            if conn.execute(select(schema.vhosts.c.name).limit(1)).first() is not None:
                return False
        self.put_vhost(Vhost(name="/", description="Default virtual host"))
        self.put_user(User(name="guest", password_hash=hash_password("guest"), tags=["administrator"]))
        self.set_permission(Permission(user="guest", vhost="/"))
        return True

    def put_vhost(self, vhost: Vhost) -> Outcome:
        if not vhost.name:
            raise PreconditionFailed("a vhost name may not be empty")
        with self._write(CLUSTER_SCOPE) as tx:
            outcome = tx.put(vhost)
        if outcome == "created":
            with self._write(vhost.name) as tx:
                for name, kind, internal in DEFAULT_EXCHANGES:
                    tx.put(Exchange(vhost=vhost.name, name=name, type=kind, internal=internal))
        return outcome

    def delete_vhost(self, name: str) -> None:
        """Remove a vhost with everything in it; its scope logs one "delete vhost" change."""
        with self._write(CLUSTER_SCOPE) as tx:
            vhost = self._get(tx.conn, Vhost, name=name)
            if vhost is None:
                raise not_found("vhost", name)
            tx.remove(vhost)
        with self._write(name) as tx:
            for cls in (Exchange, Queue, Binding, Policy, Permission):
                table = TABLE_OF[cls]
                tx.conn.execute(delete(table).where(table.c.vhost == name))
            tx.log("delete", vhost)

    def put_user(self, user: User) -> Outcome:
        with self._write(CLUSTER_SCOPE) as tx:
            return tx.put(user)

    def delete_user(self, name: str) -> None:
        with self._write(CLUSTER_SCOPE) as tx:
            user = self._get(tx.conn, User, name=name)
            if user is None:
                raise not_found("user", name)
            tx.remove(user)
            granted = self._all(tx.conn, Permission, user=name)
        for permission in granted:
            self.delete_permission(name, permission.vhost)

    def set_permission(self, permission: Permission) -> Outcome:
        with self._write(permission.vhost) as tx:
            if self._get(tx.conn, Vhost, name=permission.vhost) is None:
                raise not_found("vhost", permission.vhost)
            return tx.put(permission)

    def delete_permission(self, user: str, vhost: str) -> None:
        with self._write(vhost) as tx:
            permission = self._get(tx.conn, Permission, user=user, vhost=vhost)
            if permission is not None:
                tx.remove(permission)

    def user(self, name: str) -> User | None:
        with self.engine.connect() as conn:
            return self._get(conn, User, name=name)

    def permission(self, user: str, vhost: str) -> Permission | None:
        with self.engine.connect() as conn:
            return self._get(conn, Permission, user=user, vhost=vhost)

    # -- exchanges --------------------------------------------------------------------------------

    def _vhost_exists(self, conn: Connection, vhost: str) -> None:
        if self._get(conn, Vhost, name=vhost) is None:
            raise not_found("vhost", vhost)

    def declare_exchange(self, exchange: Exchange, passive: bool = False, system: bool = False) -> Exchange:
        """exchange.declare: the existing exchange when equivalent (or when passive), else a new one.
        `system` lifts the amq.* name rule (imports of definitions)."""
        if not passive and not system:
            if exchange.name == "":
                raise AccessRefused(_DEFAULT_EXCHANGE)
            if exchange.name.startswith("amq."):
                raise AccessRefused(f"exchange name '{exchange.name}' contains reserved prefix 'amq.*'")
        if not passive and exchange.type not in EXCHANGE_TYPES:
            raise CommandInvalid(f"unknown exchange type '{exchange.type}'")
        with self._write(exchange.vhost) as tx:
            self._vhost_exists(tx.conn, exchange.vhost)
            current: Exchange | None = self._get(tx.conn, Exchange, vhost=exchange.vhost, name=exchange.name)
            if current is None and passive:
                raise not_found("exchange", exchange.name, exchange.vhost)
            if current is not None:
                if not passive:
                    equivalence.check_exchange(exchange, current)
                return current
            tx.put(exchange)
            return exchange

    def delete_exchange(self, vhost: str, name: str, if_unused: bool = False) -> None:
        """exchange.delete: its bindings go with it; an absent exchange is no error (RabbitMQ 3.10)."""
        if name == "":
            raise AccessRefused(_DEFAULT_EXCHANGE)
        if name.startswith("amq."):
            raise AccessRefused(f"deletion of system {resource('exchange', name, vhost)} not allowed")
        with self._write(vhost) as tx:
            exchange = self._get(tx.conn, Exchange, vhost=vhost, name=name)
            if exchange is None:
                return
            if if_unused and self._all(tx.conn, Binding, vhost=vhost, source=name):
                raise PreconditionFailed(f"{resource('exchange', name, vhost)} in use")
            self._remove_exchange(tx, exchange)

    def _remove_exchange(self, tx: _Tx, exchange: Exchange) -> None:
        conn, vhost = tx.conn, exchange.vhost
        for binding in self._all(conn, Binding, vhost=vhost, source=exchange.name):
            self._remove_binding(tx, binding)
        for binding in self._all(
            conn, Binding, vhost=vhost, destination_type="exchange", destination=exchange.name
        ):
            self._remove_binding(tx, binding)
        if self._get(conn, Exchange, vhost=vhost, name=exchange.name) is not None:
            tx.remove(exchange)

    # -- queues -----------------------------------------------------------------------------------

    def declare_queue(self, queue: Queue, passive: bool = False) -> Queue:
        """queue.declare: the existing queue when equivalent (or when passive and accessible), else a
        new one with its RocketMQ topic and group. An empty name asks for a server-named queue."""
        if not passive and queue.name.startswith("amq."):
            raise AccessRefused(f"queue name '{queue.name}' contains reserved prefix 'amq.*'")
        if not queue.name and not passive:
            queue = msgspec.structs.replace(queue, name=f"amq.gen-{secrets.token_urlsafe(16)}")
        with self._write(queue.vhost) as tx:
            self._vhost_exists(tx.conn, queue.vhost)
            current: Queue | None = self._get(tx.conn, Queue, vhost=queue.vhost, name=queue.name)
            if current is None and passive:
                raise not_found("queue", queue.name, queue.vhost)
            if current is not None:
                if passive:
                    if current.exclusive_owner is not None:
                        equivalence.check_owner(queue.exclusive_owner, current)
                else:
                    equivalence.check_queue(queue, current)
                return current
            queue = msgspec.structs.replace(
                queue, topic=queue_topic(queue.vhost, queue.name), group=queue_group(queue.vhost, queue.name)
            )
            tx.put(queue)
            return queue

    def delete_queue(self, vhost: str, name: str, owner: str | None = None) -> Queue | None:
        """queue.delete as far as metadata decides (consumers and messages are the gateway's to check):
        the queue and its bindings; auto-delete exchanges left without bindings go too."""
        with self._write(vhost) as tx:
            queue: Queue | None = self._get(tx.conn, Queue, vhost=vhost, name=name)
            if queue is None:
                return None
            if queue.exclusive_owner is not None:
                equivalence.check_owner(owner, queue)
            for binding in self._all(
                tx.conn, Binding, vhost=vhost, destination_type="queue", destination=name
            ):
                self._remove_binding(tx, binding)
            tx.remove(queue)
            return queue

    def delete_owned(self, owner: str) -> list[Queue]:
        """Drop every exclusive queue of a connection that closed (or of a gateway that died)."""
        with self.engine.connect() as conn:
            owned = self._all(conn, Queue, exclusive_owner=owner)
        return [q for q in owned if self.delete_queue(q.vhost, q.name, owner) is not None]

    # -- bindings ---------------------------------------------------------------------------------

    def bind(self, binding: Binding, owner: str | None = None) -> Outcome:
        if binding.source == "" or (binding.destination_type == "exchange" and binding.destination == ""):
            raise AccessRefused(_DEFAULT_EXCHANGE)
        with self._write(binding.vhost) as tx:
            self._endpoints(tx.conn, binding, owner)
            return tx.put(binding)

    def unbind(self, binding: Binding, owner: str | None = None) -> None:
        """Remove a binding (an absent one is no error); an auto-delete source left unbound goes."""
        if binding.source == "" or (binding.destination_type == "exchange" and binding.destination == ""):
            raise AccessRefused(_DEFAULT_EXCHANGE)
        with self._write(binding.vhost) as tx:
            self._endpoints(tx.conn, binding, owner)
            if self._get(tx.conn, Binding, **key_of(binding)) is not None:
                self._remove_binding(tx, binding)

    def _endpoints(self, conn: Connection, binding: Binding, owner: str | None) -> None:
        vhost = binding.vhost
        if self._get(conn, Exchange, vhost=vhost, name=binding.source) is None:
            raise not_found("exchange", binding.source, vhost)
        if binding.destination_type == "exchange":
            if self._get(conn, Exchange, vhost=vhost, name=binding.destination) is None:
                raise not_found("exchange", binding.destination, vhost)
            return
        queue: Queue | None = self._get(conn, Queue, vhost=vhost, name=binding.destination)
        if queue is None:
            raise not_found("queue", binding.destination, vhost)
        if queue.exclusive_owner is not None:
            equivalence.check_owner(owner, queue)

    def _remove_binding(self, tx: _Tx, binding: Binding) -> None:
        tx.remove(binding)
        source: Exchange | None = self._get(tx.conn, Exchange, vhost=binding.vhost, name=binding.source)
        unbound = source is not None and not self._all(
            tx.conn, Binding, vhost=binding.vhost, source=source.name
        )
        if source is not None and source.auto_delete and unbound:
            self._remove_exchange(tx, source)

    # -- policies ---------------------------------------------------------------------------------

    def put_policy(self, policy: Policy) -> Outcome:
        with self._write(policy.vhost) as tx:
            self._vhost_exists(tx.conn, policy.vhost)
            return tx.put(policy)

    def delete_policy(self, vhost: str, name: str) -> None:
        with self._write(vhost) as tx:
            policy = self._get(tx.conn, Policy, vhost=vhost, name=name)
            if policy is None:
                raise not_found("policy", name, vhost)
            tx.remove(policy)

    # -- reads ------------------------------------------------------------------------------------

    def exists(self, kind: str, vhost: str, name: str) -> bool:
        """Whether vhost has an exchange or queue (`kind`) of this name."""
        with self.engine.connect() as conn:
            return (
                self._get(conn, Exchange if kind == "exchange" else Queue, vhost=vhost, name=name) is not None
            )

    def vhosts(self) -> list[Vhost]:
        with self.engine.connect() as conn:
            return self._all(conn, Vhost)

    def users(self) -> list[User]:
        with self.engine.connect() as conn:
            return self._all(conn, User)

    def snapshot(self, vhost: str) -> Snapshot:
        """One vhost's records and version, read in one transaction."""
        with self.engine.begin() as conn:
            found: Vhost | None = self._get(conn, Vhost, name=vhost)
            if found is None:
                raise not_found("vhost", vhost)
            return Snapshot(
                vhost=found,
                version=self._version(conn, vhost),
                exchanges=self._all(conn, Exchange, vhost=vhost),
                queues=self._all(conn, Queue, vhost=vhost),
                bindings=self._all(conn, Binding, vhost=vhost),
                policies=self._all(conn, Policy, vhost=vhost),
                permissions=self._all(conn, Permission, vhost=vhost),
            )

    def _version(self, conn: Connection, scope: str) -> int:
        row = conn.execute(select(schema.scopes.c.version).where(schema.scopes.c.name == scope)).first()
        return 0 if row is None else int(row.version)

    def version(self, scope: str) -> int:
        with self.engine.connect() as conn:
            return self._version(conn, scope)

    def changes(self, scope: str, since: int, limit: int = _WATCH_LIMIT) -> Changes:
        """The changes of `scope` after version `since`, oldest first."""
        c = schema.changes.c
        with self.engine.begin() as conn:
            version = self._version(conn, scope)
            rows = conn.execute(
                select(schema.changes)
                .where(c.scope == scope, c.version > since)
                .order_by(c.version)
                .limit(limit)
            )
            found = [msgspec.convert(plain(row), Change) for row in rows]
        reached = found[-1].version if found else version
        return Changes(scope=scope, version=reached, changes=found, reset=since > version)


@contextmanager
def _no_lock() -> Iterator[None]:
    yield
