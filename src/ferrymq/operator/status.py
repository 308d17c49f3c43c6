"""Status conditions (Ready, Progressing, Degraded) as `kubectl wait --for=condition=Ready` reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CONDITION_TYPES = ("Ready", "Progressing", "Degraded")


@dataclass(frozen=True)
class Health:
    """What a resource is doing, in one reason and message shared by its three conditions."""

    ready: bool
    progressing: bool
    degraded: bool
    reason: str
    message: str


def of_workload(want: int, ready: int, what: str) -> Health:
    """Health of `want` pods of which `ready` pass their readiness probe."""
    if ready >= want:
        return Health(True, False, False, "AllReady", f"{ready}/{want} {what} ready")
    return Health(False, True, False, "Scaling", f"{ready}/{want} {what} ready")


def waiting(reason: str, message: str) -> Health:
    """Not ready yet because something it needs is not (NameServers, controllers)."""
    return Health(False, True, False, reason, message)


def degraded(reason: str, message: str) -> Health:
    """Cannot be made as asked (a bad spec); the operator tries again when the spec changes."""
    return Health(False, False, True, reason, message)


def conditions(
    previous: list[dict[str, Any]] | None, health: Health, now: str, generation: int
) -> list[dict]:
    """The three conditions for `health`; a condition whose status is unchanged keeps its transition time."""
    before = {c.get("type"): c for c in previous or []}
    out = []
    for kind, value in zip(CONDITION_TYPES, (health.ready, health.progressing, health.degraded), strict=True):
        status = "True" if value else "False"
        old = before.get(kind) or {}
        out.append(
            {
                "type": kind,
                "status": status,
                "reason": health.reason,
                "message": health.message,
                "lastTransitionTime": old.get("lastTransitionTime", now)
                if old.get("status") == status
                else now,
                "observedGeneration": generation,
            }
        )
    return out
