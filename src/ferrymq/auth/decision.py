"""Whether a user may do something, as RocketMQ 5's ACL decides: super users may do everything;
otherwise the most specific rule that matches decides (a named resource before a prefix, a longer
prefix before a shorter one, a prefix before every resource of a type, a type before ``*``; deny
before allow between equals); no matching rule denies."""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable

from ferrymq.auth.model import Action, Decision, PolicyEntry, Resource, ResourceType, User, UserType


@functools.lru_cache(maxsize=4096)  # peers are few and parsing one costs more than a request's check
def source_address(remote: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP of a ``host:port`` or ``[v6]:port`` peer address, None when it is not one."""
    host = (
        remote.rsplit(":", 1)[0].strip("[]") if remote.count(":") == 1 or remote.startswith("[") else remote
    )
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def decide(
    user: User,
    entries: Iterable[PolicyEntry],
    resource: Resource,
    actions: frozenset[Action],
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None,
) -> Decision:
    """The decision of the most specific rule matching ``actions`` on ``resource`` from ``ip``."""
    if user.user_type is UserType.SUPER:
        return Decision.ALLOW
    matched = [entry for entry in entries if entry.matches(resource, actions, ip)]
    if not matched:
        return Decision.DENY
    return min(matched, key=_specificity).decision


def _specificity(entry: PolicyEntry) -> tuple[bool, int, int, bool]:
    """Sorts the most specific rule first (RocketMQ's order of policy entries)."""
    covered = entry.resource
    pattern = 0 if not covered.prefix else 1 if covered.name else 2  # literal, prefix, every one
    return (
        covered.type is ResourceType.ANY,
        pattern,
        -len(covered.name) if pattern == 1 else 0,
        entry.decision is not Decision.DENY,
    )
