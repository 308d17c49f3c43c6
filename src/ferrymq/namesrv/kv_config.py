"""KVConfigStore: the NameServer's namespaced settings, PUT/GET/DELETE_KV_CONFIG's storage.

Brokers and admin tools keep small cluster-wide facts here, such as ORDER_TOPIC_CONFIG
(topic → ``"broker-a:4;broker-b:4"``). Unlike routes, which brokers re-send every 30 s, these have no
other source, so they can be kept in a file shaped like Java's ``kvConfig.json``.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
"""The namespace of ordered topics' queue layouts (Java's ``NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG``)."""


class _KVConfigFile(msgspec.Struct, rename="camel"):
    config_table: dict[str, dict[str, str]] = {}


class KVConfigStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Read the file, if there is one (a missing file is an empty store)."""
        if self.path is not None and self.path.exists():
            self._table = msgspec.json.decode(self.path.read_bytes(), type=_KVConfigFile).config_table

    def get(self, namespace: str, key: str) -> str | None:
        return self._table.get(namespace, {}).get(key)

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """Every key of ``namespace``, or None when it has none."""
        table = self._table.get(namespace)
        return dict(table) if table else None

    def put(self, namespace: str, key: str, value: str) -> None:
        self._table.setdefault(namespace, {})[key] = value
        self._save()

    def delete(self, namespace: str, key: str) -> None:
        table = self._table.get(namespace)
        if table is not None and table.pop(key, None) is not None:
            if not table:
                del self._table[namespace]
            self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_bytes(msgspec.json.encode(_KVConfigFile(config_table=self._table)))
        os.replace(temporary, self.path)  # a crash leaves the old file or the new one, never half of one
