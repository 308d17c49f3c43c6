"""How every role reads its settings: defaults, then a TOML file, then `FERRYMQ_<NAME>` environment
variables, then command-line flags (later wins).

A role's settings are one dataclass; a field holding another dataclass (the broker's `store`) lends
its fields to the same flat namespace, as RocketMQ's broker.conf mixes broker and store settings.
Names are RocketMQ's in snake_case, and RocketMQ's own camelCase spelling is accepted beside them
(`flushDiskType` = `flush_disk_type`). Every error names the setting and where its value came from.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

ENV_PREFIX = "FERRYMQ_"
# RocketMQ's broker config spells DLedger "DLeger" (enableDLegerCommitLog, dLegerPeers): both are ours.
_DLEDGER = re.compile(r"(?<![a-z])d_?led?ger(?![a-z])")
T = TypeVar("T")


class SettingsError(ValueError):
    """A setting that does not exist, has a value of the wrong kind, or a file that cannot be read."""


class ReadOnlySetting(SettingsError):
    """A setting fixed at start, asked to change while the server runs."""


def snake(name: str) -> str:
    """RocketMQ's camelCase name in our spelling: `brokerIP1` → `broker_ip1` (snake_case stays)."""
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return name.replace("-", "_").replace(".", "_").lower()


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # the annotation as written: "int", "str", "Path | None", ...
    default: Any  # dataclasses.MISSING when the setting must be given
    owner: type  # the dataclass declaring it (the role's, or a nested one's)


def settings_of(cls: type) -> dict[str, Setting]:
    """Every setting of the role's dataclass `cls`, nested dataclasses' flattened in, by name."""
    found: dict[str, Setting] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        nested = hints.get(f.name)
        if isinstance(nested, type) and dataclasses.is_dataclass(nested):
            found.update(settings_of(nested))
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        found[f.name] = Setting(f.name, kind, default, cls)
    return found


def load(
    cls: type[T],
    toml_path: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] = os.environ,
    defaults: Mapping[str, Any] | None = None,
) -> T:
    """`cls` from defaults < the TOML file < FERRYMQ_* environment < `overrides` (None values skipped).

    `defaults`: a command's own choices in place of the dataclass's (`ferrymq dev`'s smaller CommitLog
    segments), which everything else still overrides."""
    known = settings_of(cls)
    values: dict[str, tuple[Any, str]] = {}  # name: (raw value, where it came from)
    for key, raw in (defaults or {}).items():
        values[_known_name(key, known, "the command's defaults")] = (raw, "the command's defaults")
    if toml_path is not None:
        for key, raw in read_toml(toml_path).items():
            values[_known_name(key, known, str(toml_path))] = (raw, str(toml_path))
    for name in known:
        env = environ.get(ENV_PREFIX + name.upper())
        if env is not None:
            values[name] = (env, f"${ENV_PREFIX}{name.upper()}")
    for key, raw in (overrides or {}).items():
        if raw is not None:
            values[_known_name(key, known, "the command line")] = (raw, "the command line")
    typed = {name: coerce(known[name], raw, where) for name, (raw, where) in values.items()}
    try:
        return _build(cls, typed)
    except (TypeError, ValueError) as e:
        raise SettingsError(str(e)) from None


def coerce(setting: Setting, raw: Any, where: str = "") -> Any:
    """A TOML, environment or flag value as the setting's type, or a SettingsError saying why not."""
    kind = setting.kind.replace(" ", "")
    optional = kind.endswith("|None")
    base = kind.removesuffix("|None")
    try:
        if optional and (raw is None or raw == ""):
            return None
        if base == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("true", "1", "yes", "on"):
                return True
            if text in ("false", "0", "no", "off"):
                return False
            raise ValueError
        if base in ("int", "float"):
            if isinstance(raw, bool) or (base == "int" and isinstance(raw, float)):
                raise ValueError
            return int(str(raw).replace("_", "")) if base == "int" else float(raw)
        if base == "Path":
            return Path(raw)
        if base == "str":
            if not isinstance(raw, str | int | float) or isinstance(raw, bool):
                raise ValueError
            return str(raw)
        return raw  # a structured setting (a table, a list): taken as TOML gave it
    except (TypeError, ValueError):
        origin = f" (from {where})" if where else ""
        raise SettingsError(f"setting {setting.name!r} must be {setting.kind}, not {raw!r}{origin}") from None


def _build(cls: type[T], typed: dict[str, Any]) -> T:
    """`cls(**...)`, nested dataclasses built from their own settings first."""
    hints = typing.get_type_hints(cls)
    args: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]  # T is a dataclass
        nested = hints.get(f.name)
        if isinstance(nested, type) and dataclasses.is_dataclass(nested):
            args[f.name] = _build(nested, typed)
        elif f.name in typed:
            args[f.name] = typed[f.name]
    return cls(**args)


def read_toml(path: Path) -> dict[str, Any]:
    """The file's settings, a [store]-like table read as its settings; SettingsError if unreadable."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as e:
        raise SettingsError(f"cannot read {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{path} is not valid TOML: {e}") from None
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and snake(key) in ("store", "broker", "namesrv", "controller"):
            flat.update(value)  # a [store] table reads as its settings
        else:
            flat[key] = value
    return flat


def _known_name(key: str, known: Mapping[str, Any], where: str) -> str:
    name = key if key in known else _DLEDGER.sub("dledger", snake(key))
    if name in known:
        return name
    raise SettingsError(unknown(key, known, where))


def unknown(key: str, known: Mapping[str, Any], where: str) -> str:
    """What to say of a setting `key` (in `where`) that is none of `known`: with the closest name."""
    close = difflib.get_close_matches(snake(key), known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{where + ': ' if where else ''}unknown setting {key!r}{hint}"


def reference(cls: type) -> list[tuple[str, str, str]]:
    """(name, type, default as TOML would write it) of every setting: the configuration reference."""
    return [(s.name, s.kind, _toml_value(s.default)) for s in settings_of(cls).values()]


def _toml_value(value: Any) -> str:
    if value is dataclasses.MISSING:
        return "(required)"
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:_}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Path):
        home = Path.home()
        return f"~/{value.relative_to(home)}" if value.is_relative_to(home) else str(value)
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


# --- the running server's settings, as RocketMQ's admin calls show and change them -----------------
# (GET/UPDATE_BROKER_CONFIG, GET/UPDATE_NAMESRV_CONFIG: camelCase names, values as text)

HIDDEN = "******"  # what a secret shows as


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def is_secret(name: str) -> bool:
    return name.endswith(("password", "secret_key"))


def settings_view(*configs: Any) -> dict[str, str]:
    """Every scalar setting of `configs` (dataclasses) by camelCase name, as text; secrets hidden."""
    view = {}
    for config in configs:
        for f in dataclasses.fields(config):
            value = getattr(config, f.name)
            if dataclasses.is_dataclass(value):
                continue
            if is_secret(f.name) and value:
                view[camel(f.name)] = HIDDEN
            elif isinstance(value, bool):
                view[camel(f.name)] = str(value).lower()
            else:
                view[camel(f.name)] = "" if value is None else str(value)
    return view


def apply_settings(
    updates: Mapping[str, str], *configs: Any, read_only: frozenset[str] = frozenset()
) -> dict[str, str]:
    """Set each of `updates` (RocketMQ's camelCase names, or ours) on the running config that has it;
    all or nothing. ReadOnlySetting for a name in `read_only` (camelCase), SettingsError for an
    unknown or ill-typed one, or when the config's own check (``__post_init__``) fails the new values."""
    owners: dict[str, tuple[Any, Setting]] = {}  # name: (the config object holding it, the setting)
    for config in configs:
        own = {f.name for f in dataclasses.fields(config)}
        owners.update((n, (config, s)) for n, s in settings_of(type(config)).items() if n in own)
    planned = []
    for key, raw in updates.items():
        name = key if key in owners else snake(key)
        if camel(name) in read_only:
            raise ReadOnlySetting(f"{key} cannot be changed while the server runs")
        if name not in owners:
            raise SettingsError(unknown(key, owners, ""))
        config, setting = owners[name]
        planned.append((config, name, coerce(setting, raw, "the update")))
    before = [(config, name, getattr(config, name)) for config, name, _ in planned]
    for config, name, value in planned:
        setattr(config, name, value)
    for config in configs:
        check = getattr(config, "__post_init__", None)
        try:
            if check is not None:
                check()
        except ValueError as e:
            for owner, name, value in before:
                setattr(owner, name, value)
            raise SettingsError(str(e)) from None
    return dict(updates)
