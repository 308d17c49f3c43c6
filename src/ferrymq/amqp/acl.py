"""AMQP users that are the cluster's ACL users: their logins checked against its users' secret keys,
what they do against its rules, as a RocketMQ client's requests would be.

RabbitMQ's three permissions map onto RocketMQ's actions on the resources behind a queue (its topic
and consumer group, meta/naming.py): configure is Create (declare) or Delete, write is Pub on the
queue's topic (publish: on the topic of every queue the message is routed to; queue.bind: on the
bound queue's), read is Sub on the queue's group and topic (consume, get, purge). Exchanges hold no
messages: declaring or deleting one is Create or Delete on ``Topic:AMQP_EX-<vhost>-<exchange>``, and
binding from or publishing to one needs nothing of its own (what reaches a queue is checked there).
Refusals are RabbitMQ's channel error 403 ACCESS_REFUSED, on the audit trail too. A consumer whose
user loses read on its queue is cancelled (basic.cancel) when the rules change, not at its next
method: it has none (docs/security.md).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from ferrymq.amqp.access import Kind, Operation
from ferrymq.auth import audit
from ferrymq.auth.decision import source_address
from ferrymq.auth.model import Action, Resource
from ferrymq.auth.registry import AuthError, AuthRegistry
from ferrymq.meta.entities import Queue
from ferrymq.meta.naming import exchange_resource, queue_group, queue_topic
from ferrymq.protocol.amqp.errors import ChannelException, ReplyCode

_PUB, _SUB = frozenset({Action.PUB}), frozenset({Action.SUB})
_CREATE, _DELETE = frozenset({Action.CREATE}), frozenset({Action.DELETE})
_DELETES = {(40, 20), (50, 40)}  # exchange.delete, queue.delete: the configure that is Delete
_CONSUME = (60, 20)
_METHODS = {
    (40, 10): "exchange.declare", (40, 20): "exchange.delete", (40, 30): "exchange.bind",
    (40, 40): "exchange.unbind", (50, 10): "queue.declare", (50, 20): "queue.bind",
    (50, 30): "queue.purge", (50, 40): "queue.delete", (50, 50): "queue.unbind",
    (60, 20): "basic.consume", (60, 40): "basic.publish", (60, 70): "basic.get",
}  # fmt: skip

Need = tuple[Resource, frozenset[Action]]


def login_refusal(registry: AuthRegistry, username: str, password: str) -> str | None:
    """None when ``password`` is the secret key of the enabled user ``username``; else why not."""
    try:
        user = registry.user_for(username)
    except AuthError as e:
        return str(e)
    if not hmac.compare_digest(user.password.encode(), password.encode()):
        return "check password failed"
    return None


def needs(operation: Operation, kind: Kind, vhost: str, name: str, method: tuple[int, int]) -> list[Need]:
    """The resources and actions a RabbitMQ permission check stands for (module docstring)."""
    if kind == "exchange":
        if operation != "configure":
            return []
        wanted = _DELETE if method in _DELETES else _CREATE
        return [(Resource.topic(exchange_resource(vhost, name)), wanted)]
    topic, group = Resource.topic(queue_topic(vhost, name)), Resource.group(queue_group(vhost, name))
    if operation == "write":
        return [(topic, _PUB)]
    if operation == "read":
        return [(group, _SUB), (topic, _SUB)]
    wanted = _DELETE if method in _DELETES else _CREATE
    return [(topic, wanted), (group, wanted)]


class AclAccess:
    """What one connection's ACL user may do in its vhost, decided by the cluster's rules as they are
    at each check (a rule changed at run time applies to the next method)."""

    def __init__(self, registry: AuthRegistry, user: str, vhost: str, source: str) -> None:
        self.registry = registry
        self.user = user
        self.vhost = vhost
        self.source = source
        self._ip = source_address(source)
        self._may_publish: dict[str, int] = {}  # topic -> registry version it was allowed at

    def check(self, operation: Operation, kind: Kind, name: str, class_id: int, method_id: int) -> None:
        """ChannelException 403 unless the rules let the user do it."""
        wanted = needs(operation, kind, self.vhost, name, (class_id, method_id))
        if wanted:
            self._authorize(wanted, f"{kind} '{name or 'amq.default'}'", class_id, method_id)

    def check_routed(self, queues: Iterable[Queue], class_id: int, method_id: int) -> None:
        """A publish: Pub on the topic of every queue it reaches (remembered per topic until users or
        rules change: a publisher asks the same for every message)."""
        version, allowed = self.registry.version, self._may_publish
        for queue in queues:
            if allowed.get(queue.topic) != version:
                wanted = [(Resource.topic(queue.topic), _PUB)]
                self._authorize(wanted, f"queue '{queue.name}'", class_id, method_id)
                allowed[queue.topic] = version

    def read_refusal(self, queue: str) -> str | None:
        """Why the user may no longer read ``queue`` (as basic.consume asks), None while it may."""
        return self._refusal(needs("read", "queue", self.vhost, queue, _CONSUME), *_CONSUME)

    def _authorize(self, wanted: list[Need], shown: str, class_id: int, method_id: int) -> None:
        refusal = self._refusal(wanted, class_id, method_id)
        if refusal is not None:
            reason = f"access to {shown} in vhost '{self.vhost}' refused for user '{self.user}': {refusal}"
            raise ChannelException(ReplyCode.ACCESS_REFUSED, reason, class_id, method_id)

    def _refusal(self, wanted: list[Need], class_id: int, method_id: int) -> str | None:
        """Why the rules refuse the user ``wanted`` (on the audit trail too), None when they allow it."""
        registry = self.registry
        try:
            user = registry.user_for(self.user)
            for resource, actions in wanted:
                registry.authorize(user, resource, actions, self._ip)
        except AuthError as e:
            method = _METHODS.get((class_id, method_id), f"{class_id}.{method_id}")
            audit.refused(self.user, f"amqp={method}", self.source, str(e))
            return str(e)
        return None
