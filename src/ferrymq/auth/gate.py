"""The check every remoting request passes on a server with authentication on.

``RemotingGate`` is the dispatcher's guard (``RemotingServer.set_guard``): it authenticates the
signature, then authorises what the request's code needs (requests.py). A refusal is answered with
NO_PERMISSION (16) and RocketMQ's remark, and logged on the audit trail.

Every request's signature is checked, over every extField and the body, by the signer's key made
once per user (registry.Signer). What the rules decide is remembered on the signer (made anew
whenever users or rules change) by peer, code and the values of the extFields the code's needs are
read from, so that a producer's sends after the first cost a lookup, not a resolution of resources
and rules.
"""

from __future__ import annotations

from ferrymq.auth import audit
from ferrymq.auth.decision import source_address
from ferrymq.auth.model import User, UserType
from ferrymq.auth.registry import AuthError, AuthRegistry, remember
from ferrymq.auth.requests import NEEDS, Need, RequestNotUnderstood
from ferrymq.protocol.acl_signing import ACCESS_KEY
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.remoting import RemotingCommand

_UNKNOWN = object()


class RemotingGate:
    def __init__(self, registry: AuthRegistry) -> None:
        self.registry = registry
        self._signers = registry.signers  # cleared, never replaced, when users or rules change

    def __call__(self, remote_address: str, request: RemotingCommand) -> RemotingCommand | None:
        """None to let ``request`` through; else the refusal to answer it with."""
        fields = request.ext_fields
        try:
            # the hot path in few frames: a known signer's key checks the signature in one C call
            signer = self._signers.get(fields.get(ACCESS_KEY))  # type: ignore[arg-type]
            if signer is None or not signer.key.verify(fields, request.body, request.version):
                signer = self.registry.signed_by(fields, request.body, request.version)  # or why not
            how = NEEDS.get(request.code)
            if how is None or signer.user.user_type is UserType.SUPER:
                return None
            picked = how.picked
            try:
                key = None if picked is None else (remote_address, request.code, picked(fields))
            except KeyError:
                key = None
            if key is None:  # the needs are read from the body too, or a field is missing: decided anew
                self._authorize(signer.user, remote_address, how.of(request))
                return None
            decided = signer.decided
            refusal = decided.get(key, _UNKNOWN)
            if refusal is _UNKNOWN:
                try:
                    self._authorize(signer.user, remote_address, how.of(request))
                    refusal = None
                except AuthError as e:
                    refusal = str(e)
                remember(decided, key, refusal)
            if refusal is None:
                return None
            reason = str(refusal)
        except (AuthError, RequestNotUnderstood) as e:
            reason = str(e)
        except Exception as e:  # whatever a peer sends, the answer is a refusal, never a crash
            reason = f"cannot check the request: {type(e).__name__}"
        who = fields.get(ACCESS_KEY)
        audit.refused(who if isinstance(who, str) else None, f"code={request.code}", remote_address, reason)
        return request.make_response(ResponseCode.NO_PERMISSION, reason)

    def _authorize(self, user: User, remote_address: str, wanted: list[Need]) -> None:
        """AuthError unless ``user`` may have everything in ``wanted`` from this peer."""
        if wanted:
            ip = source_address(remote_address)
            for resource, actions in wanted:
                self.registry.authorize(user, resource, actions, ip)
