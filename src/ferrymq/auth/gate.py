"""The check every remoting request passes on a server with authentication on.

``RemotingGate`` is the dispatcher's guard (``RemotingServer.set_guard``): it authenticates the
signature, then authorises what the request's code needs (requests.py). A refusal is answered with
NO_PERMISSION (16) and RocketMQ's remark, and logged on the audit trail.
"""

from __future__ import annotations

from ferrymq.auth import audit
from ferrymq.auth.decision import source_address
from ferrymq.auth.model import UserType
from ferrymq.auth.registry import AuthError, AuthRegistry
from ferrymq.auth.requests import RequestNotUnderstood, needs
from ferrymq.protocol.acl_signing import ACCESS_KEY
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.remoting import RemotingCommand


class RemotingGate:
    def __init__(self, registry: AuthRegistry) -> None:
        self.registry = registry

    def __call__(self, remote_address: str, request: RemotingCommand) -> RemotingCommand | None:
        """None to let ``request`` through; else the refusal to answer it with."""
        try:
            user = self.registry.authenticate(request.ext_fields, request.body, request.version)
            if user.user_type is UserType.SUPER:
                return None
            wanted = needs(request)
            if wanted:
                ip = source_address(remote_address)
                for resource, actions in wanted:
                    self.registry.authorize(user, resource, actions, ip)
            return None
        except (AuthError, RequestNotUnderstood) as e:
            reason = str(e)
        except Exception as e:  # whatever a peer sends, the answer is a refusal, never a crash
            reason = f"cannot check the request: {type(e).__name__}"
        who = request.ext_fields.get(ACCESS_KEY)
        audit.refused(who if isinstance(who, str) else None, f"code={request.code}", remote_address, reason)
        return request.make_response(ResponseCode.NO_PERMISSION, reason)
