"""Quotas of a cluster: set, deleted and listed on every broker of the cluster (masters and slaves:
each enforces its own), through the same fan-out as users and ACL rules."""

from __future__ import annotations

from typing import Any

from ferrymq.client.admin_acl import AclAdmin
from ferrymq.protocol.codes import RequestCode


class QuotaAdmin(AclAdmin):
    """Mixed into Admin."""

    async def set_quota(
        self, kind: str, resource: str, *, messages: float = 0, bytes: float = 0, connections: int = 0,
        cluster: str | None = None,
    ) -> list[str]:  # fmt: skip
        """Limit `kind` (produce, consume, connections) on `resource` (Topic:x, User:x, Group:x) to
        `messages` and/or `bytes` per second, or `connections` at once; the brokers that took it."""
        body = {"kind": kind, "resource": resource, "messages": messages, "bytes": bytes,
                "connections": connections}  # fmt: skip
        return await self._apply_auth(RequestCode.QUOTA_SET, {}, body, cluster, namesrvs=False)

    async def delete_quota(self, kind: str, resource: str, *, cluster: str | None = None) -> list[str]:
        ext = {"kind": kind, "resource": resource}
        return await self._apply_auth(RequestCode.QUOTA_DELETE, ext, None, cluster, namesrvs=False)

    async def list_quotas(self, *, cluster: str | None = None) -> list[dict[str, Any]]:
        return await self._ask_auth(RequestCode.QUOTA_LIST, {}, cluster, namesrvs=False)
