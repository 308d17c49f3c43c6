"""Quotas on a broker: kept in `<store>/config/quota.json` (written atomically after each change,
read at start), changed at run time by QUOTA_* requests, and the connection guard.

QUOTA_SET takes a quota as its JSON body; QUOTA_DELETE `kind` and `resource` fields; QUOTA_LIST
answers the quotas as a JSON list. Each change goes to the audit trail.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ferrymq.auth import audit
from ferrymq.broker.quota.limiter import QuotaLimiter
from ferrymq.broker.quota.model import Quota, QuotaError
from ferrymq.protocol.acl_signing import ACCESS_KEY
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.store.files import atomic_write, durable_copies

log = logging.getLogger(__name__)
FILE_NAME = "quota.json"


def load_quotas(limiter: QuotaLimiter, path: Path) -> None:
    """Fill `limiter` from `path` (or its backup when the main copy is damaged); none: no quotas."""
    for candidate, data in durable_copies(path):
        try:
            limiter.restore(json.loads(data))
            return
        except (ValueError, QuotaError) as e:
            log.error("%s is damaged (%s); trying its backup", candidate, e)


class QuotaProcessor:
    def __init__(self, limiter: QuotaLimiter, path: Path) -> None:
        self.limiter = limiter
        self.path = path

    def register(self, server) -> None:
        server.register(RequestCode.QUOTA_SET, self.set)
        server.register(RequestCode.QUOTA_DELETE, self.delete)
        server.register(RequestCode.QUOTA_LIST, self.list)

    async def set(self, conn, request: RemotingCommand) -> RemotingCommand:
        try:
            quota = Quota.from_json(json.loads(bytes(request.body) or b"{}"))
        except (ValueError, QuotaError) as e:
            return request.make_response(ResponseCode.INVALID_PARAMETER, f"bad quota: {e}")
        self.limiter.set(quota)
        return self._changed(conn, request, "set-quota", quota.describe())

    async def delete(self, conn, request: RemotingCommand) -> RemotingCommand:
        kind, resource = request.ext_fields.get("kind") or "", request.ext_fields.get("resource") or ""
        try:
            quota = self.limiter.delete(kind, resource)
        except LookupError as e:
            return request.make_response(ResponseCode.INVALID_PARAMETER, str(e.args[0]))
        return self._changed(conn, request, "delete-quota", quota.describe())

    async def list(self, conn, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=json.dumps(self.limiter.snapshot()).encode())

    def _changed(self, conn, request: RemotingCommand, what: str, target: str) -> RemotingCommand:
        atomic_write(self.path, json.dumps(self.limiter.snapshot(), indent=1).encode())
        who = request.ext_fields.get(ACCESS_KEY)
        audit.changed(who if isinstance(who, str) else None, what, target, conn.remote_address)
        return request.make_response(ResponseCode.SUCCESS)


class ConnectionGuard:
    """The remoting guard counting each user's client connections (by the AccessKey their requests
    carry) and refusing the requests of one beyond the user's limit with NO_PERMISSION."""

    def __init__(self, limiter: QuotaLimiter) -> None:
        self.limiter = limiter

    def __call__(self, remote_address: str, request: RemotingCommand) -> RemotingCommand | None:
        user = request.ext_fields.get(ACCESS_KEY)
        if not user or not isinstance(user, str):
            return None
        refusal = self.limiter.connected(remote_address, user)
        if refusal is None:
            return None
        audit.refused(user, f"code={request.code}", remote_address, refusal)
        return request.make_response(ResponseCode.NO_PERMISSION, refusal)
