"""Who may log in and which vhosts they may open: the metadata service's users and permissions
(`MetaAuthenticator`), or a fixed table (`StaticAuthenticator`: RabbitMQ's default guest/guest on
vhost "/")."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Protocol

from ferrymq.meta.entities import Permission

if TYPE_CHECKING:
    from ferrymq.amqp.catalog import Metadata


class Authenticator(Protocol):
    async def login(self, username: str, password: str) -> bool:
        """True when the password is right for the user."""
        ...

    async def permission(self, username: str, vhost: str) -> Permission | None:
        """The user's permissions in the vhost; None when the vhost is absent or closed to the user."""
        ...


class StaticAuthenticator:
    """A fixed table of users and vhosts."""

    def __init__(
        self, users: dict[str, str] | None = None, vhosts: frozenset[str] = frozenset({"/"})
    ) -> None:
        self._users = {"guest": "guest"} if users is None else dict(users)
        self._vhosts = vhosts

    async def login(self, username: str, password: str) -> bool:
        expected = self._users.get(username)
        return expected is not None and hmac.compare_digest(expected.encode(), password.encode())

    async def permission(self, username: str, vhost: str) -> Permission | None:
        return Permission(user=username, vhost=vhost) if vhost in self._vhosts else None


class MetaAuthenticator:
    """Users, password hashes and permissions as the metadata service holds them."""

    def __init__(self, metadata: Metadata) -> None:
        self.metadata = metadata

    async def login(self, username: str, password: str) -> bool:
        return await self.metadata.authenticate(username, password) is not None

    async def permission(self, username: str, vhost: str) -> Permission | None:
        return await self.metadata.permission(username, vhost)
