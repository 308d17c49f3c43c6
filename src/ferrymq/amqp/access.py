"""What one connection's user may do in its vhost: RabbitMQ's configure / write / read permission
regexes, checked per resource (and remembered, since publishes ask for every message), refused with
RabbitMQ's 403 text."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, Protocol

from ferrymq.meta.access import permits
from ferrymq.meta.entities import Permission
from ferrymq.protocol.amqp.errors import ChannelException, ReplyCode

if TYPE_CHECKING:
    from ferrymq.meta.entities import Queue

Operation = Literal["configure", "write", "read"]
Kind = Literal["exchange", "queue"]


class Permits(Protocol):
    """What a connection's user may do: the metadata service's permissions (`Access`) or the cluster's
    ACL rules (acl.py)."""

    user: str

    def check(self, operation: Operation, kind: Kind, name: str, class_id: int, method_id: int) -> None:
        """ChannelException 403 unless the user may `operation` the resource."""
        ...

    def check_routed(self, queues: Iterable[Queue], class_id: int, method_id: int) -> None:
        """ChannelException 403 unless the user may publish into each of these queues."""
        ...

    def read_refusal(self, queue: str) -> str | None:
        """Why the user may no longer read ``queue`` (its consumers there stop), None while it may."""
        ...


class Access:
    def __init__(self, permission: Permission) -> None:
        self.permission = permission
        self.user = permission.user
        self._known: dict[tuple[Operation, Kind, str], bool] = {}

    def check_routed(self, queues: Iterable[Queue], class_id: int, method_id: int) -> None:
        """RabbitMQ's write on the exchange (checked before routing) is all a publish needs."""

    def read_refusal(self, queue: str) -> str | None:
        """None: a connection's permissions are those it opened with (as RabbitMQ)."""
        return None

    def check(self, operation: Operation, kind: Kind, name: str, class_id: int, method_id: int) -> None:
        """ChannelException 403 unless the user may `operation` the resource."""
        key = (operation, kind, name)
        allowed = self._known.get(key)
        if allowed is None:
            allowed = self._known[key] = permits(getattr(self.permission, operation), name or "amq.default")
        if not allowed:
            p, shown = self.permission, name or "amq.default"
            reason = f"access to {kind} '{shown}' in vhost '{p.vhost}' refused for user '{p.user}'"
            raise ChannelException(ReplyCode.ACCESS_REFUSED, reason, class_id, method_id)
