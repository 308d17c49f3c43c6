"""RabbitMQ's definitions JSON (`rabbitmqctl export_definitions`, GET /api/definitions) in and out.

An import is idempotent: records already there are left alone and counted as unchanged, so importing
the same file twice changes nothing the second time. What cannot be taken (an exchange of a plugin
type, a declaration that conflicts with an existing one, runtime parameters) is listed in the report,
and the rest is imported all the same."""

from __future__ import annotations

from typing import Any

import msgspec

from ferrymq.meta.entities import Binding, Exchange, Permission, Policy, Queue, User, Vhost
from ferrymq.meta.errors import MetaError
from ferrymq.meta.store import EXCHANGE_TYPES, MetaStore

_NOT_IMPORTED = ("parameters", "global_parameters", "topic_permissions")


class KindReport(msgspec.Struct, kw_only=True):
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    problems: list[str] = msgspec.field(default_factory=list)


class ImportReport(msgspec.Struct, kw_only=True):
    """Per kind of record: how many were created, updated or already so, and what was not taken."""

    kinds: dict[str, KindReport] = msgspec.field(default_factory=dict)

    def kind(self, name: str) -> KindReport:
        return self.kinds.setdefault(name, KindReport())

    @property
    def changed(self) -> int:
        return sum(k.created + k.updated for k in self.kinds.values())

    def summary(self) -> str:
        lines = []
        for name, k in self.kinds.items():
            line = f"{name}: {k.created} created, {k.updated} updated, {k.unchanged} unchanged"
            lines.append(line + (f", {len(k.problems)} not imported" if k.problems else ""))
            lines.extend(f"  - {problem}" for problem in k.problems)
        return "\n".join(lines)


def _tags(value: Any) -> list[str]:
    """Tags as a list: 3.x exports a list, older ones a comma-separated string."""
    if isinstance(value, str):
        return [t for t in value.split(",") if t]
    return list(value or [])


def _declare(store: MetaStore, entity: Exchange | Queue, report: KindReport) -> None:
    """Declare an exchange or queue unless an equivalent one exists; a conflicting one is reported."""
    kind = "exchange" if isinstance(entity, Exchange) else "queue"
    exists = store.exists(kind, entity.vhost, entity.name)
    try:
        if isinstance(entity, Exchange):
            store.declare_exchange(entity, system=True)
        else:
            store.declare_queue(entity)
    except MetaError as exc:
        report.problems.append(exc.text)
        return
    if exists:
        report.unchanged += 1
    else:
        report.created += 1


def import_definitions(store: MetaStore, doc: dict[str, Any]) -> ImportReport:
    """Take what `doc` defines into `store`, parents first (vhosts, users, ..., bindings last)."""
    report = ImportReport()

    def count(kind: str, outcome: str) -> None:
        k = report.kind(kind)
        setattr(k, outcome, getattr(k, outcome) + 1)

    for v in doc.get("vhosts", []):
        meta = v.get("metadata") or {}
        vhost = Vhost(name=v["name"], description=meta.get("description", ""), tags=_tags(meta.get("tags")))
        count("vhosts", store.put_vhost(vhost))
    for u in doc.get("users", []):
        user = User(
            name=u["name"],
            password_hash=u.get("password_hash", ""),
            hashing_algorithm=u.get("hashing_algorithm", "rabbit_password_hashing_sha256"),
            tags=_tags(u.get("tags")),
        )
        count("users", store.put_user(user))
    for p in doc.get("permissions", []):
        permission = Permission(
            user=p["user"], vhost=p["vhost"], configure=p["configure"], write=p["write"], read=p["read"]
        )
        count("permissions", store.set_permission(permission))
    for p in doc.get("policies", []):
        policy = Policy(
            vhost=p["vhost"],
            name=p["name"],
            pattern=p["pattern"],
            apply_to=p.get("apply-to", "all"),
            definition=p.get("definition", {}),
            priority=p.get("priority", 0),
        )
        count("policies", store.put_policy(policy))
    for x in doc.get("exchanges", []):
        if x["type"] not in EXCHANGE_TYPES:
            report.kind("exchanges").problems.append(
                f"exchange '{x['name']}' in vhost '{x['vhost']}': type '{x['type']}' is not supported"
            )
            continue
        exchange = Exchange(
            vhost=x["vhost"],
            name=x["name"],
            type=x["type"],
            durable=x.get("durable", True),
            auto_delete=x.get("auto_delete", False),
            internal=x.get("internal", False),
            arguments=x.get("arguments") or {},
        )
        _declare(store, exchange, report.kind("exchanges"))
    for q in doc.get("queues", []):
        queue = Queue(
            vhost=q["vhost"],
            name=q["name"],
            durable=q.get("durable", True),
            auto_delete=q.get("auto_delete", False),
            arguments=q.get("arguments") or {},
        )
        _declare(store, queue, report.kind("queues"))
    for b in doc.get("bindings", []):
        binding = Binding(
            vhost=b["vhost"],
            source=b["source"],
            destination=b["destination"],
            destination_type=b.get("destination_type", "queue"),
            routing_key=b.get("routing_key", ""),
            arguments=b.get("arguments") or {},
        )
        try:
            count("bindings", store.bind(binding))
        except MetaError as exc:
            report.kind("bindings").problems.append(exc.text)
    for key in _NOT_IMPORTED:
        if doc.get(key):
            report.kind(key).problems.append(f"{len(doc[key])} {key} are not imported (not supported yet)")
    return report


def export_definitions(store: MetaStore) -> dict[str, Any]:
    """Everything in the store in RabbitMQ's definitions format (without the built-in exchanges)."""
    doc: dict[str, Any] = {
        "vhosts": [],
        "users": [],
        "permissions": [],
        "policies": [],
        "exchanges": [],
        "queues": [],
        "bindings": [],
    }
    for user in store.users():
        doc["users"].append({**msgspec.to_builtins(user), "limits": {}})
    for vhost in store.vhosts():
        doc["vhosts"].append(
            {
                "name": vhost.name,
                "limits": [],
                "metadata": {"description": vhost.description, "tags": vhost.tags},
            }
        )
        snap = store.snapshot(vhost.name)
        doc["permissions"] += [msgspec.to_builtins(p) for p in snap.permissions]
        for p in snap.policies:
            policy = msgspec.to_builtins(p)
            policy["apply-to"] = policy.pop("apply_to")
            doc["policies"].append(policy)
        doc["exchanges"] += [
            msgspec.to_builtins(x) for x in snap.exchanges if x.name and not x.name.startswith("amq.")
        ]
        doc["queues"] += [
            {
                k: v
                for k, v in msgspec.to_builtins(q).items()
                if k not in ("exclusive_owner", "topic", "group")
            }
            for q in snap.queues
            if q.exclusive_owner is None
        ]
        doc["bindings"] += [msgspec.to_builtins(b) for b in snap.bindings]
    return doc
