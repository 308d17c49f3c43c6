"""The operations the HTTP API carries: each MetaService method by name, with the types of its
arguments and result, so the server decodes requests and the client decodes answers from one table."""

from __future__ import annotations

from typing import Any

from ferrymq.meta.definitions import ImportReport
from ferrymq.meta.entities import Binding, Changes, Exchange, Permission, Policy, Queue, Snapshot, User, Vhost

# name → (argument types, result type)
CALLS: dict[str, tuple[dict[str, Any], Any]] = {
    "declare_exchange": ({"exchange": Exchange, "passive": bool}, Exchange),
    "delete_exchange": ({"vhost": str, "name": str, "if_unused": bool}, None),
    "declare_queue": ({"queue": Queue, "passive": bool}, Queue),
    "delete_queue": ({"vhost": str, "name": str, "owner": str | None}, Queue | None),
    "delete_owned": ({"owner": str}, list[Queue]),
    "bind": ({"binding": Binding, "owner": str | None}, str),
    "unbind": ({"binding": Binding, "owner": str | None}, None),
    "put_vhost": ({"vhost": Vhost}, str),
    "delete_vhost": ({"name": str}, None),
    "put_user": ({"user": User}, str),
    "delete_user": ({"name": str}, None),
    "set_permission": ({"permission": Permission}, str),
    "delete_permission": ({"user": str, "vhost": str}, None),
    "put_policy": ({"policy": Policy}, str),
    "delete_policy": ({"vhost": str, "name": str}, None),
    "import_definitions": ({"doc": dict[str, Any]}, ImportReport),
    "export_definitions": ({}, dict[str, Any]),
    "snapshot": ({"vhost": str}, Snapshot),
    "authenticate": ({"username": str, "password": str}, User | None),
    "permission": ({"user": str, "vhost": str}, Permission | None),
    "watch": ({"scope": str, "since": int, "timeout": float}, Changes),
}
