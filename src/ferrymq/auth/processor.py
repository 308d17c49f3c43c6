"""AUTH_* requests (RocketMQ 5's ACL 2.0 administration codes 3001-3010): users and rules changed at
run time, saved at once, and every change written to the audit trail.

Headers and bodies are RocketMQ's: ``username`` + a ``UserInfo`` body for users, ``subject`` + an
``AclInfo`` body for rules, ``subject`` + ``resource`` to delete rules, ``filter`` /
``subjectFilter`` / ``resourceFilter`` to list. Passwords are never sent back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ferrymq.auth import audit
from ferrymq.auth.model import Acl, AuthModelError, Resource, User, UserType, subject_user
from ferrymq.auth.registry import AuthError, AuthRegistry
from ferrymq.protocol.acl_signing import ACCESS_KEY
from ferrymq.protocol.codes import RequestCode as codes
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.remoting import RemotingCommand


class AuthAdminProcessor:
    def __init__(self, registry: AuthRegistry, save: Callable[[], None]) -> None:
        """``save``: persist the registry after a change."""
        self.registry = registry
        self._save = save

    def register(self, server) -> None:
        handlers = {
            codes.AUTH_CREATE_USER: self.create_user,
            codes.AUTH_UPDATE_USER: self.update_user,
            codes.AUTH_DELETE_USER: self.delete_user,
            codes.AUTH_GET_USER: self.get_user,
            codes.AUTH_LIST_USER: self.list_users,
            codes.AUTH_CREATE_ACL: self.create_acl,
            codes.AUTH_UPDATE_ACL: self.update_acl,
            codes.AUTH_DELETE_ACL: self.delete_acl,
            codes.AUTH_GET_ACL: self.get_acl,
            codes.AUTH_LIST_ACL: self.list_acls,
            codes.AUTH_SNAPSHOT: self.snapshot,
        }
        for code, handler in handlers.items():
            server.register(code, _answering(handler))

    # --- users ---------------------------------------------------------------------------------

    def create_user(self, source: str, request: RemotingCommand) -> RemotingCommand:
        user = User.from_json(_body(request), username=request.ext_fields.get("username") or None)
        self._may_make(request, user)
        self.registry.create_user(user)
        return self._changed(source, request, "create-user", f"{user.username} type={user.user_type.value}")

    def update_user(self, source: str, request: RemotingCommand) -> RemotingCommand:
        changes = _body(request)
        name = request.ext_fields.get("username") or changes.get("username")
        name = _name(name)
        current = self.registry.users.get(name)
        if current is not None:
            self._may_make(request, User.from_json(current.to_json() | changes, username=name))
        user = self.registry.update_user(changes, name)
        fields = ",".join(sorted(k for k in changes if k != "username")) or "nothing"
        return self._changed(source, request, "update-user", f"{user.username} ({fields})")

    def delete_user(self, source: str, request: RemotingCommand) -> RemotingCommand:
        name = _name(request.ext_fields.get("username"))
        self.registry.delete_user(name)
        return self._changed(source, request, "delete-user", name)

    def get_user(self, source: str, request: RemotingCommand) -> RemotingCommand:
        name = _name(request.ext_fields.get("username"))
        user = self.registry.users.get(name)
        if user is None:
            raise LookupError(f"user {name} does not exist")
        return _json(request, user.to_json(with_password=False))

    def list_users(self, source: str, request: RemotingCommand) -> RemotingCommand:
        text = request.ext_fields.get("filter") or ""
        users = [u.to_json(with_password=False) for n, u in sorted(self.registry.users.items()) if text in n]
        return _json(request, users)

    # --- rules ---------------------------------------------------------------------------------

    def create_acl(self, source: str, request: RemotingCommand) -> RemotingCommand:
        return self._put_acl(source, request, replace=False, what="create-acl")

    def update_acl(self, source: str, request: RemotingCommand) -> RemotingCommand:
        return self._put_acl(source, request, replace=False, what="update-acl")

    def _put_acl(self, source: str, request: RemotingCommand, *, replace: bool, what: str) -> RemotingCommand:
        data = _body(request)
        if request.ext_fields.get("subject") and not data.get("subject"):
            data["subject"] = request.ext_fields["subject"]
        acl = Acl.from_json(data)
        self.registry.put_acl(acl, replace=replace)
        rules = "; ".join(
            f"{e.decision.value} {','.join(sorted(a.value for a in e.actions))} on {e.resource}"
            for e in acl.entries
        )
        return self._changed(source, request, what, f"User:{acl.username} [{rules}]")

    def delete_acl(self, source: str, request: RemotingCommand) -> RemotingCommand:
        name = subject_user(request.ext_fields.get("subject"))
        text = request.ext_fields.get("resource") or ""
        resources = [Resource.parse(r) for r in text.split(",") if r.strip()]
        for resource in resources or (None,):
            self.registry.delete_acl(name, resource)
        target = f"User:{name} {','.join(map(str, resources)) or 'all rules'}"
        return self._changed(source, request, "delete-acl", target)

    def get_acl(self, source: str, request: RemotingCommand) -> RemotingCommand:
        name = subject_user(request.ext_fields.get("subject"))
        acl = self.registry.acls.get(name)
        if acl is None:
            raise LookupError(f"user {name} has no ACL")
        return _json(request, acl.to_json())

    def list_acls(self, source: str, request: RemotingCommand) -> RemotingCommand:
        subject = request.ext_fields.get("subjectFilter") or ""
        resource = request.ext_fields.get("resourceFilter") or ""
        out = [
            acl.to_json()
            for name, acl in sorted(self.registry.acls.items())
            if subject in f"User:{name}"
            and (not resource or any(resource in str(e.resource) for e in acl.entries))
        ]
        return _json(request, out)

    # --- for fronts ------------------------------------------------------------------------------

    def snapshot(self, source: str, request: RemotingCommand) -> RemotingCommand:
        """Every user and rule, secrets included, to a super user who signed the request (checked here
        whether or not this server checks requests); nothing but the version when the caller holds
        this ``epoch`` and ``version`` already."""
        try:
            caller = self.registry.authenticate(request.ext_fields, request.body, request.version)
        except AuthError as e:
            caller, reason = None, str(e)
        else:
            reason = "only a super user may read the users' secret keys"
        if caller is None or caller.user_type is not UserType.SUPER:
            who = request.ext_fields.get(ACCESS_KEY)
            audit.refused(who if isinstance(who, str) else None, f"code={request.code}", source, reason)
            return request.make_response(ResponseCode.NO_PERMISSION, reason)
        registry, fields = self.registry, request.ext_fields
        current = {"epoch": registry.epoch, "version": str(registry.version)}
        if fields.get("epoch") == current["epoch"] and fields.get("version") == current["version"]:
            answer = request.make_response(ResponseCode.SUCCESS)
        else:
            answer = _json(request, registry.snapshot())
        answer.ext_fields.update(current)
        return answer

    def _may_make(self, request: RemotingCommand, user: User) -> None:
        """Only a super user makes super users (a caller the registry does not know is one only
        while authentication is off)."""
        caller = self.registry.users.get(str(request.ext_fields.get(ACCESS_KEY) or ""))
        if user.user_type is UserType.SUPER and caller is not None and caller.user_type is not UserType.SUPER:
            raise AuthModelError("only a super user may make a super user")

    def _changed(self, source: str, request: RemotingCommand, what: str, target: str) -> RemotingCommand:
        self._save()
        who = request.ext_fields.get(ACCESS_KEY)
        audit.changed(who if isinstance(who, str) else None, what, target, source)
        return request.make_response(ResponseCode.SUCCESS)


def _answering(handler: Callable[[str, RemotingCommand], RemotingCommand]):
    """The remoting handler of ``handler``: bad input → INVALID_PARAMETER, unknown user or rule →
    RocketMQ's USER_NOT_EXIST / POLICY_NOT_EXIST, with the reason as remark."""

    async def handle(connection, request: RemotingCommand) -> RemotingCommand:
        try:
            return handler(connection.remote_address, request)
        except AuthModelError as e:
            return request.make_response(ResponseCode.INVALID_PARAMETER, str(e))
        except LookupError as e:
            message = str(e.args[0]) if e.args else str(e)
            code = ResponseCode.POLICY_NOT_EXIST if "ACL" in message else ResponseCode.USER_NOT_EXIST
            return request.make_response(code, message)

    return handle


def _name(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise AuthModelError("the request needs a username")
    return value.strip()


def _body(request: RemotingCommand) -> dict[str, Any]:
    try:
        data = json.loads(bytes(request.body) or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise AuthModelError("the body is not JSON") from None
    if not isinstance(data, dict):
        raise AuthModelError("the body must be a JSON object")
    return data


def _json(request: RemotingCommand, value: object) -> RemotingCommand:
    return request.make_response(ResponseCode.SUCCESS, body=json.dumps(value).encode())
