"""Whether a user may do something: super users may do everything; otherwise a deny rule that
matches wins, then an allow rule that matches; no matching rule denies."""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable

from ferrymq.auth.model import Action, Decision, PolicyEntry, Resource, User, UserType


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
    """Allow when one of ``actions`` on ``resource`` from ``ip`` is allowed and none is denied."""
    if user.user_type is UserType.SUPER:
        return Decision.ALLOW
    allowed = False
    for entry in entries:
        if entry.matches(resource, actions, ip):
            if entry.decision is Decision.DENY:
                return Decision.DENY
            allowed = True
    return Decision.ALLOW if allowed else Decision.DENY
