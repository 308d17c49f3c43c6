"""Authentication and access control in the manner of RocketMQ 5's ACL 2.0.

Users (AccessKey = username, SecretKey = password) sign their remoting requests; each request maps
to resources (``Cluster``, ``Topic:<name>``, ``Group:<name>``) and actions (Pub, Sub, Create, ...),
and a user's ACL rules allow or deny them. The model, the decision and the request mapping are
pure (model.py, decision.py, requests.py; the signature is protocol/acl_signing.py); the registry
keeps users and rules in memory; persistence, the remoting gate, the admin request processor and
the audit log sit apart.
"""

from ferrymq.auth.model import (
    Acl,
    Action,
    AuthModelError,
    Decision,
    PolicyEntry,
    Resource,
    User,
    UserStatus,
    UserType,
)
from ferrymq.auth.registry import AuthRegistry
from ferrymq.protocol.acl_signing import Credentials

__all__ = [
    "Acl",
    "Action",
    "AuthModelError",
    "AuthRegistry",
    "Credentials",
    "Decision",
    "PolicyEntry",
    "Resource",
    "User",
    "UserStatus",
    "UserType",
]
