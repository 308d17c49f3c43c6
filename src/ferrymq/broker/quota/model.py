"""A quota: what it limits (produce, consume, connections), on whom (Topic:, User:, Group:), and
its limits. Validated when made, so a bad one is refused with a reason before any broker keeps it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

PRODUCE, CONSUME, CONNECTIONS = "produce", "consume", "connections"
# Which resources each kind may name: producers by topic or user, consumers also by group.
_SCOPES = {PRODUCE: ("Topic", "User"), CONSUME: ("Topic", "User", "Group"), CONNECTIONS: ("User",)}


class QuotaError(ValueError):
    """A quota that cannot be: the message is safe to send back."""


@dataclass(frozen=True, slots=True)
class Quota:
    kind: str
    resource: str  # "Topic:orders", "User:app", "Group:billing"
    messages: float = 0.0  # per second; 0: no limit
    bytes: float = 0.0  # per second; 0: no limit
    connections: int = 0  # at once; 0: no limit

    def __post_init__(self) -> None:
        scopes = _SCOPES.get(self.kind)
        if scopes is None:
            raise QuotaError(f"quota kind must be one of {', '.join(_SCOPES)}, not {self.kind!r}")
        scope, _, name = self.resource.partition(":")
        if scope not in scopes or not name:
            wanted = " or ".join(f"{s}:<name>" for s in scopes)
            raise QuotaError(f"a {self.kind} quota is on {wanted}, not {self.resource!r}")
        for field, value in (("messages", self.messages), ("bytes", self.bytes),
                             ("connections", self.connections)):  # fmt: skip
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise QuotaError(f"{field} must be a finite number >= 0, not {value!r}")
        if self.kind == CONNECTIONS:
            if not self.connections or self.messages or self.bytes:
                raise QuotaError("a connections quota sets connections (> 0) only")
        elif self.connections or not (self.messages or self.bytes):
            raise QuotaError(f"a {self.kind} quota sets messages and/or bytes per second (> 0)")

    @property
    def key(self) -> tuple[str, str]:
        return self.kind, self.resource

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "resource": self.resource}
        for field in ("messages", "bytes", "connections"):
            if value := getattr(self, field):
                out[field] = value
        return out

    @classmethod
    def from_json(cls, data: object) -> Quota:
        if not isinstance(data, dict):
            raise QuotaError("a quota is a JSON object")
        try:
            return cls(
                str(data.get("kind", "")), str(data.get("resource", "")), _number(data, "messages"),
                _number(data, "bytes"), int(_number(data, "connections")),
            )  # fmt: skip
        except (TypeError, ValueError) as e:
            raise QuotaError(str(e)) from None

    def describe(self) -> str:
        parts = [
            f"{self.messages:g} msg/s" if self.messages else "",
            f"{self.bytes:g} B/s" if self.bytes else "",
            f"{self.connections} connections" if self.connections else "",
        ]
        return f"{self.kind} {self.resource}: {', '.join(p for p in parts if p)}"


def _number(data: dict, field: str) -> float:
    value = data.get(field) or 0
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise QuotaError(f"{field} must be a number, not {value!r}")
    return float(value)
