"""Users and ACL rules of a cluster, as mqadmin's createUser / createAcl / ... with ``-c cluster``.

A change goes to every broker of the cluster (masters and slaves: each checks requests itself) and
to every NameServer, by RocketMQ 5's AUTH_* requests; it applies at once, with no restart.
"""

from __future__ import annotations

import json
from typing import Any

from ferrymq.client.instance import ClientError
from ferrymq.net import RemotingError
from ferrymq.protocol.bodies import ClusterInfo
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand


class AclAdmin:
    """Mixed into Admin (it has ``instance`` and ``cluster_info``)."""

    async def create_user(
        self, username: str, password: str, *, user_type: str = "Normal", cluster: str | None = None
    ) -> list[str]:
        info = {"username": username, "password": password, "userType": user_type, "userStatus": "enable"}
        return await self._apply_auth(RequestCode.AUTH_CREATE_USER, {"username": username}, info, cluster)

    async def update_user(
        self, username: str, *, password: str | None = None, user_type: str | None = None,
        status: str | None = None, cluster: str | None = None,
    ) -> list[str]:  # fmt: skip
        info = {"username": username, "password": password, "userType": user_type, "userStatus": status}
        body = {k: v for k, v in info.items() if v is not None}
        return await self._apply_auth(RequestCode.AUTH_UPDATE_USER, {"username": username}, body, cluster)

    async def delete_user(self, username: str, *, cluster: str | None = None) -> list[str]:
        return await self._apply_auth(RequestCode.AUTH_DELETE_USER, {"username": username}, None, cluster)

    async def list_users(self, *, cluster: str | None = None, filter: str = "") -> list[dict[str, Any]]:
        return await self._ask_auth(RequestCode.AUTH_LIST_USER, {"filter": filter}, cluster)

    async def create_acl(
        self, username: str, resources: list[str], actions: list[str], *, decision: str = "Allow",
        source_ips: list[str] | None = None, cluster: str | None = None, update: bool = False,
    ) -> list[str]:  # fmt: skip
        """Give ``username`` a rule per resource: ``actions`` allowed (or denied) from ``source_ips``."""
        subject = f"User:{username}"
        entries = [
            {"resource": r, "actions": actions, "decision": decision, "sourceIps": source_ips or []}
            for r in resources
        ]
        body = {"subject": subject, "policies": [{"policyType": "Custom", "entries": entries}]}
        code = RequestCode.AUTH_UPDATE_ACL if update else RequestCode.AUTH_CREATE_ACL
        return await self._apply_auth(code, {"subject": subject}, body, cluster)

    async def delete_acl(
        self, username: str, resources: list[str] | None = None, *, cluster: str | None = None
    ) -> list[str]:
        ext = {"subject": f"User:{username}", "resource": ",".join(resources or [])}
        return await self._apply_auth(RequestCode.AUTH_DELETE_ACL, ext, None, cluster)

    async def list_acls(
        self, *, cluster: str | None = None, subject: str = "", resource: str = ""
    ) -> list[dict[str, Any]]:
        ext = {"subjectFilter": subject, "resourceFilter": resource}
        return await self._ask_auth(RequestCode.AUTH_LIST_ACL, ext, cluster)

    # --- where the requests go -----------------------------------------------------------------

    async def _auth_targets(self, cluster: str | None, namesrvs: bool = True) -> list[str]:
        """Every broker (every id) of ``cluster`` (or of all clusters), then every NameServer."""
        info: ClusterInfo = await self.cluster_info()  # type: ignore[attr-defined]
        names = info.cluster_addr_table.get(cluster, []) if cluster else list(info.broker_addr_table)
        if cluster and not names:
            raise ClientError(f"cluster {cluster} has no broker")
        brokers = [
            addr
            for name in sorted(names)
            for _, addr in sorted(info.broker_addr_table[name].broker_addrs.items())
        ]
        return brokers + (list(self.instance.namesrvs) if namesrvs else [])  # type: ignore[attr-defined]

    async def _apply_auth(
        self, code: int, ext: dict[str, str], body: object, cluster: str | None, namesrvs: bool = True
    ) -> list[str]:
        """Send the change to every target; the addresses that took it. ClientError names those that
        did not (the others keep the change: run the command again once they are back)."""
        done, failed = [], []
        payload = json.dumps(body).encode() if body is not None else b""
        for addr in await self._auth_targets(cluster, namesrvs):
            request = RemotingCommand(code, ext_fields=dict(ext), body=payload)
            try:
                response = await self.instance.invoke(addr, request)  # type: ignore[attr-defined]
            except RemotingError as e:
                failed.append(f"{addr}: {e}")
                continue
            if response.code == ResponseCode.SUCCESS:
                done.append(addr)
            else:
                failed.append(f"{addr}: {response.remark} (code {response.code})")
        if failed:
            raise ClientError("; ".join(failed) + (f" (applied on {', '.join(done)})" if done else ""))
        return done

    async def _ask_auth(
        self, code: int, ext: dict[str, str], cluster: str | None, namesrvs: bool = True
    ) -> list[dict[str, Any]]:
        """The answer of the first broker of ``cluster`` that gives one."""
        errors = []
        for addr in await self._auth_targets(cluster, namesrvs):
            try:
                response = await self.instance.invoke(addr, RemotingCommand(code, ext_fields=dict(ext)))  # type: ignore[attr-defined]
            except RemotingError as e:
                errors.append(f"{addr}: {e}")
                continue
            if response.code == ResponseCode.SUCCESS:
                return json.loads(bytes(response.body) or b"[]")
            errors.append(f"{addr}: {response.remark} (code {response.code})")
        raise ClientError("; ".join(errors) or "no broker to ask")
