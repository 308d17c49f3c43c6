"""Users and ACL rules, with RocketMQ 5's names and JSON shapes (``UserInfo``, ``AclInfo``).

A resource is written as RocketMQ writes it: ``Cluster`` (or ``Cluster:<name>``), ``Topic:<name>``,
``Group:<name>``, a prefix ``Topic:order-*``, every resource of a type ``Topic:*``, or ``*`` for
everything. Names of enum values are RocketMQ's (``Pub``, ``Super``, ``enable``, ``Allow``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class AuthModelError(ValueError):
    """A user, rule or resource that cannot be read: the message says what is wrong."""


class _Named(Enum):
    """An enum read by its RocketMQ name, case-insensitively (``pub``, ``Pub`` and ``PUB``)."""

    @classmethod
    def parse(cls, name: object):
        if isinstance(name, str):
            for member in cls:
                if member.value.lower() == name.strip().lower():
                    return member
        choices = ", ".join(m.value for m in cls)
        raise AuthModelError(f"{cls.__name__} must be one of {choices}, not {name!r}")


class UserType(_Named):
    SUPER = "Super"
    NORMAL = "Normal"


class UserStatus(_Named):
    ENABLE = "enable"
    DISABLE = "disable"


class Action(_Named):
    ALL = "All"
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"


class Decision(_Named):
    ALLOW = "Allow"
    DENY = "Deny"


class ResourceType(_Named):
    ANY = "Any"
    CLUSTER = "Cluster"
    TOPIC = "Topic"
    GROUP = "Group"


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource a request touches (``name`` literal) or a rule covers (also ``prefix`` or any)."""

    type: ResourceType
    name: str = ""
    prefix: bool = False
    """``name`` is a prefix (``Topic:order-*``); with an empty name, every resource of the type."""

    @classmethod
    def cluster(cls) -> Resource:
        return cls(ResourceType.CLUSTER, "", prefix=True)

    @classmethod
    def topic(cls, name: str) -> Resource:
        return cls(ResourceType.TOPIC, name)

    @classmethod
    def group(cls, name: str) -> Resource:
        return cls(ResourceType.GROUP, name)

    @classmethod
    def parse(cls, text: object) -> Resource:
        if not isinstance(text, str) or not text.strip():
            raise AuthModelError(f"a resource is Cluster, Topic:<name>, Group:<name> or *, not {text!r}")
        text = text.strip()
        if text == "*":
            return cls(ResourceType.ANY, "", prefix=True)
        kind, _, name = text.partition(":")
        rtype = ResourceType.parse(kind)
        if rtype is ResourceType.ANY:
            raise AuthModelError("write * for every resource, not Any:...")
        if rtype is ResourceType.CLUSTER:
            return cls.cluster()  # one cluster per broker: its name does not narrow the rule
        if not name:
            raise AuthModelError(f"{rtype.value} needs a name: {rtype.value}:<name>, a prefix or *")
        if name.endswith("*"):
            return cls(rtype, name[:-1], prefix=True)
        return cls(rtype, name)

    def __str__(self) -> str:
        if self.type is ResourceType.ANY:
            return "*"
        if self.type is ResourceType.CLUSTER:
            return "Cluster"
        return f"{self.type.value}:{self.name}{'*' if self.prefix else ''}"

    def covers(self, wanted: Resource) -> bool:
        """Whether this rule resource covers the (literal) resource a request wants."""
        if self.type is ResourceType.ANY:
            return True
        if self.type is not wanted.type:
            return False
        return wanted.name.startswith(self.name) if self.prefix else wanted.name == self.name


def _networks(source_ips: object) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    if source_ips is None:
        return ()
    if not isinstance(source_ips, list):
        raise AuthModelError(f"sourceIps must be a list of addresses or CIDR ranges, not {source_ips!r}")
    networks = []
    for ip in source_ips:
        try:
            networks.append(ipaddress.ip_network(str(ip).strip(), strict=False))
        except ValueError:
            raise AuthModelError(f"source IP {ip!r} is not an address or CIDR range") from None
    return tuple(networks)


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    """One rule: these actions on this resource, from these sources (none: anywhere), allowed or denied."""

    resource: Resource
    actions: frozenset[Action]
    decision: Decision = Decision.ALLOW
    source_ips: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def from_json(cls, data: object) -> PolicyEntry:
        if not isinstance(data, dict):
            raise AuthModelError(f"a policy entry is an object, not {data!r}")
        actions = data.get("actions")
        if not isinstance(actions, list) or not actions:
            raise AuthModelError('a policy entry needs actions, e.g. ["Pub", "Sub"]')
        return cls(
            Resource.parse(data.get("resource")),
            frozenset(Action.parse(a) for a in actions),
            Decision.parse(data.get("decision", "Allow")),
            _networks(data.get("sourceIps")),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "resource": str(self.resource),
            "actions": sorted(a.value for a in self.actions),
            "decision": self.decision.value,
        }
        if self.source_ips:
            out["sourceIps"] = [str(n) for n in self.source_ips]
        return out

    def matches(
        self, wanted: Resource, actions: frozenset[Action], ip: ipaddress._BaseAddress | None
    ) -> bool:
        """The entry speaks of this resource, one of these actions, and this source address."""
        if not self.resource.covers(wanted):
            return False
        if Action.ALL not in self.actions and not (self.actions & actions):
            return False
        if self.source_ips:
            return ip is not None and any(ip in network for network in self.source_ips)
        return True


@dataclass(frozen=True, slots=True)
class User:
    username: str
    password: str
    user_type: UserType = UserType.NORMAL
    status: UserStatus = UserStatus.ENABLE

    @classmethod
    def from_json(cls, data: object, *, username: str | None = None) -> User:
        """A ``UserInfo`` (``username``, ``password``, ``userType``, ``userStatus``)."""
        if not isinstance(data, dict):
            raise AuthModelError(f"a user is an object, not {data!r}")
        name = username if username is not None else data.get("username")
        password = data.get("password")
        if not isinstance(name, str) or not name.strip():
            raise AuthModelError("a user needs a username")
        if not isinstance(password, str) or not password:
            raise AuthModelError(f"user {name} needs a password")
        return cls(
            name.strip(),
            password,
            UserType.parse(data.get("userType") or "Normal"),
            UserStatus.parse(data.get("userStatus") or "enable"),
        )

    def to_json(self, *, with_password: bool = True) -> dict[str, Any]:
        out = {"username": self.username, "userType": self.user_type.value, "userStatus": self.status.value}
        if with_password:
            out["password"] = self.password
        return out


SUBJECT_PREFIX = "User:"


def subject_user(subject: object) -> str:
    """The username of an ACL subject (``User:alice``, or plain ``alice``)."""
    if not isinstance(subject, str) or not subject.strip():
        raise AuthModelError("an ACL needs a subject, User:<name>")
    subject = subject.strip()
    name = subject[len(SUBJECT_PREFIX) :] if subject.startswith(SUBJECT_PREFIX) else subject
    if not name:
        raise AuthModelError("an ACL needs a subject, User:<name>")
    return name


@dataclass(frozen=True, slots=True)
class Acl:
    """A user's rules (RocketMQ's ``AclInfo``: subject and policies of entries)."""

    username: str
    entries: tuple[PolicyEntry, ...] = field(default=())

    @classmethod
    def from_json(cls, data: object) -> Acl:
        if not isinstance(data, dict):
            raise AuthModelError(f"an ACL is an object, not {data!r}")
        policies = data.get("policies") or []
        if not isinstance(policies, list):
            raise AuthModelError("policies must be a list")
        entries: list[PolicyEntry] = []
        for policy in policies:
            if not isinstance(policy, dict) or not isinstance(policy.get("entries") or [], list):
                raise AuthModelError(f"a policy is an object with entries, not {policy!r}")
            entries += (PolicyEntry.from_json(e) for e in policy.get("entries") or [])
        return cls(subject_user(data.get("subject")), tuple(entries))

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": SUBJECT_PREFIX + self.username,
            "policies": [{"policyType": "Custom", "entries": [e.to_json() for e in self.entries]}],
        }

    def merged(self, other: Acl) -> Acl:
        """These rules with ``other``'s added; an entry for the same resource is replaced (RocketMQ's
        updateAcl)."""
        replaced = {e.resource for e in other.entries}
        return Acl(
            self.username, tuple(e for e in self.entries if e.resource not in replaced) + other.entries
        )

    def without(self, resource: Resource | None) -> Acl:
        """These rules without those on ``resource`` (all of them when None)."""
        if resource is None:
            return Acl(self.username)
        return Acl(self.username, tuple(e for e in self.entries if e.resource != resource))
