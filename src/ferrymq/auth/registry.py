"""AuthRegistry: the users and ACL rules one server knows, and the checks made against them.

Pure and in memory: whoever owns it persists ``snapshot()`` after each change (persist.py) and
loads it back with ``restore``.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import secrets
from collections.abc import Callable, Hashable
from typing import Any, Concatenate, ParamSpec, TypeVar

from ferrymq.auth.decision import decide
from ferrymq.auth.model import Acl, Action, AuthModelError, Decision, Resource, User, UserStatus, UserType
from ferrymq.protocol.acl_signing import ACCESS_KEY, SIGNATURE, SigningKey

log = logging.getLogger(__name__)


class AuthError(Exception):
    """A request refused: not authenticated, or not allowed. The message is safe to send back."""


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _changes(
    method: Callable[Concatenate[AuthRegistry, _P], _R],
) -> Callable[Concatenate[AuthRegistry, _P], _R]:
    """Marks a method that changes users or rules: whatever was decided before is forgotten when it
    returns (or fails half-way), here and nowhere else."""

    @functools.wraps(method)
    def changing(self: AuthRegistry, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        finally:
            self.decided.clear()
            self.signers.clear()
            self.version += 1
            for listener in list(self.listeners):
                try:
                    listener()
                except Exception:
                    log.exception("a listener to changes of users or rules failed")

    return changing


DECISIONS = 10_000  # decisions remembered in one memory; past it, start again


def remember(memory: dict[Hashable, Any], key: Hashable, outcome: object) -> None:
    """Keep ``outcome`` under ``key`` in ``memory``, a bounded one: full, it starts again."""
    if len(memory) >= DECISIONS:
        memory.clear()
    memory[key] = outcome


class Signer:
    """An enabled user as requests signed with its AccessKey meet it: the user, its secret key made
    ready for checking signatures (keyed once, not per request), and what the remoting gate
    decided for it. Made anew after every change of users or rules, so none of it outlives one."""

    __slots__ = ("decided", "key", "user")

    def __init__(self, user: User) -> None:
        self.user = user
        self.key = SigningKey(user.password.encode())
        self.decided: dict[Hashable, str | None] = {}
        """The gate's refusals (None: allowed) by what decides them (gate.py)."""


class AuthRegistry:
    def __init__(self) -> None:
        self.users: dict[str, User] = {}
        self.acls: dict[str, Acl] = {}
        self.version = 0  # counts changes: a front that mirrors these users asks for news by it
        self.epoch = secrets.token_hex(8)  # this registry's versions, apart from another's or a restart's
        self.listeners: list[Callable[[], None]] = []
        """Called after every change of users or rules (e.g. the AMQP gateway: its consumers)."""
        self.signers: dict[str, Signer] = {}
        """Enabled users by AccessKey, made ready as they sign (``signed_by``) until users or rules
        change."""
        self.decided: dict[Hashable, object] = {}
        """What checks decided, until users or rules next change: a producer asks the same thing
        per send. Keys are ``authorize``'s; ``remember`` adds to it."""

    # --- checks --------------------------------------------------------------------------------

    def authenticate(self, ext_fields: dict[str, str], body: bytes | memoryview, version: int) -> User:
        """The user who signed this remoting request; AuthError when nobody valid did."""
        return self.signed_by(ext_fields, body, version).user

    def signed_by(self, ext_fields: dict[str, str], body: bytes | memoryview, version: int) -> Signer:
        """``authenticate``, giving the user's Signer."""
        access_key = ext_fields.get(ACCESS_KEY)
        if not access_key or not isinstance(access_key, str):
            raise AuthError("No accessKey is configured")
        given = ext_fields.get(SIGNATURE)
        if not given or not isinstance(given, str):
            raise AuthError("No signature is configured")
        signer = self.signers.get(access_key)
        if signer is None:
            signer = Signer(self.user_for(access_key))  # raises: the reason to answer
            self.signers[access_key] = signer
        if not signer.key.verify(ext_fields, body, version):
            raise AuthError("check signature failed")
        return signer

    def user_for(self, username: str) -> User:
        """The enabled user named ``username``; AuthError otherwise."""
        user = self.users.get(username)
        if user is None:
            raise AuthError(f"User:{username} is not found")
        if user.status is UserStatus.DISABLE:
            raise AuthError(f"User:{username} is disabled")
        return user

    def authorize(
        self,
        user: User,
        resource: Resource,
        actions: frozenset[Action],
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None,
    ) -> None:
        """AuthError unless ``user`` may do one of ``actions`` on ``resource`` from ``ip``."""
        key = (user.username, resource, actions, ip)
        decision = self.decided.get(key)
        if decision is None:
            acl = self.acls.get(user.username)
            decision = decide(user, acl.entries if acl is not None else (), resource, actions, ip)
            self.remember(key, decision)
        if decision is not Decision.ALLOW:
            wanted = ",".join(sorted(a.value for a in actions))
            raise AuthError(f"User:{user.username} has no permission to access {resource} with {wanted}")

    def remember(self, key: Hashable, outcome: object) -> None:
        """Keep ``outcome`` under ``key`` in ``decided``."""
        remember(self.decided, key, outcome)

    # --- changes (each marked @_changes) --------------------------------------------------------

    @_changes
    def create_user(self, user: User) -> None:
        if user.username in self.users:
            raise AuthModelError(f"user {user.username} already exists")
        self.users[user.username] = user

    @_changes
    def update_user(self, changes: dict[str, Any], username: str) -> User:
        """Change what ``changes`` (a UserInfo) names: password, type, status."""
        current = self.users.get(username)
        if current is None:
            raise LookupError(f"user {username} does not exist")
        merged = current.to_json() | {k: v for k, v in changes.items() if v not in (None, "")}
        self.users[username] = updated = User.from_json(merged, username=username)
        return updated

    @_changes
    def delete_user(self, username: str) -> None:
        if self.users.pop(username, None) is None:
            raise LookupError(f"user {username} does not exist")
        self.acls.pop(username, None)

    @_changes
    def put_acl(self, acl: Acl, *, replace: bool) -> None:
        """Add ``acl``'s rules to the user's (an entry for the same resource is replaced), or replace
        the user's rules altogether."""
        if acl.username not in self.users:
            raise LookupError(f"user {acl.username} does not exist")
        current = self.acls.get(acl.username)
        self.acls[acl.username] = acl if replace or current is None else current.merged(acl)

    @_changes
    def delete_acl(self, username: str, resource: Resource | None) -> None:
        current = self.acls.get(username)
        if current is None:
            raise LookupError(f"user {username} has no ACL")
        remaining = current.without(resource)
        if remaining.entries:
            self.acls[username] = remaining
        else:
            del self.acls[username]

    @_changes
    def ensure_super_user(self, username: str, password: str) -> bool:
        """Create the first super user (``init_username``) if it does not exist yet."""
        if not username or username in self.users:
            return False
        self.users[username] = User(username, password, UserType.SUPER)
        return True

    # --- persistence ---------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {
            "users": [u.to_json() for u in self.users.values()],
            "acls": [a.to_json() for a in self.acls.values()],
        }

    @_changes
    def restore(self, data: object) -> None:
        if not isinstance(data, dict):
            raise AuthModelError("the auth file holds an object with users and acls")
        users = [User.from_json(u) for u in data.get("users") or []]
        acls = [Acl.from_json(a) for a in data.get("acls") or []]
        self.users = {u.username: u for u in users}
        self.acls = {a.username: a for a in acls}
