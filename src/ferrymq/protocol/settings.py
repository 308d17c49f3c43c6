"""A server's settings as RocketMQ's admin calls show and change them: camelCase names and string
values (GET_BROKER_CONFIG, UPDATE_BROKER_CONFIG, GET_NAMESRV_CONFIG, UPDATE_NAMESRV_CONFIG).

Works on the typed config dataclasses (``BrokerConfig``, ``StoreConfig``, ``NamesrvConfig``); pure.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any


class SettingsError(ValueError):
    """An update names a setting that does not exist, may not change, or gets a bad value."""

    def __init__(self, message: str, *, read_only: bool = False) -> None:
        super().__init__(message)
        self.read_only = read_only


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "" if value is None else str(value)


def settings_view(*configs: Any) -> dict[str, str]:
    """Every scalar field of `configs` (dataclasses), by camelCase name, as text."""
    view = {}
    for config in configs:
        for f in dataclasses.fields(config):
            value = getattr(config, f.name)
            if not dataclasses.is_dataclass(value):
                view[camel(f.name)] = _text(value)
    return view


def _coerce(name: str, raw: str, current: Any, annotation: str) -> Any:
    kind = type(current) if current is not None else None
    try:
        if kind is bool or annotation == "bool":
            lowered = raw.strip().lower()
            if lowered not in ("true", "false"):
                raise ValueError("expected true or false")
            return lowered == "true"
        if kind is int or annotation == "int":
            return int(raw)
        if kind is float or annotation == "float":
            return float(raw)
        if (kind is not None and issubclass(kind, Path)) or "Path" in annotation:
            return Path(raw) if raw else None
    except ValueError as e:
        raise SettingsError(f"{name}={raw!r}: {e}") from None
    return raw


def apply_settings(
    updates: dict[str, str], *configs: Any, read_only: frozenset[str] = frozenset()
) -> dict[str, str]:
    """Set each camelCase `updates` entry on the config that has the field; all or nothing.

    Returns the changed settings. Raises SettingsError naming the first unknown, read-only or badly
    typed setting, or the config's own check (``__post_init__``) that the new values fail; nothing
    is changed then."""
    fields = {
        camel(f.name): (config, f)
        for config in configs
        for f in dataclasses.fields(config)
        if not dataclasses.is_dataclass(getattr(config, f.name))
    }
    planned = []
    for name, raw in updates.items():
        if name in read_only:
            raise SettingsError(f"{name} cannot be changed while the server runs", read_only=True)
        if name not in fields:
            raise SettingsError(f"there is no setting {name}")
        config, f = fields[name]
        planned.append((config, f.name, _coerce(name, raw, getattr(config, f.name), str(f.type))))
    before = [(config, attr, getattr(config, attr)) for config, attr, _ in planned]
    for config, attr, value in planned:
        setattr(config, attr, value)
    for config in configs:
        check = getattr(config, "__post_init__", None)
        try:
            if check is not None:
                check()
        except ValueError as e:
            for owner, attr, value in before:
                setattr(owner, attr, value)
            raise SettingsError(str(e)) from None
    return dict(updates)
