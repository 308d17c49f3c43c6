"""The few API calls the handlers make, on kubernetes_asyncio's ApiClient, with plain dicts.

Objects travel as dicts, never as the client's generated models, so that what the render
functions return is what is sent. Changes are JSON merge patches: no PUT, no server-side apply,
which every API server (and the test emulator) understands.
"""

from __future__ import annotations

import os
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

Obj = dict[str, Any]

_PLURALS = {"StatefulSet": "statefulsets", "Deployment": "deployments", "Service": "services", "Pod": "pods"}


def path(api_version: str, plural: str, namespace: str, name: str | None = None) -> str:
    """The REST path of a namespaced collection, or of one object in it."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{base}/namespaces/{namespace}/{plural}" + (f"/{name}" if name else "")


def path_of(obj: Obj, namespace: str) -> str:
    return path(obj["apiVersion"], _PLURALS[obj["kind"]], namespace, obj["metadata"]["name"])


def needs_patch(current: Obj, desired: Obj) -> bool:
    """Whether `desired` says something `current` does not (fields the server adds do not count)."""
    if isinstance(desired, dict) and isinstance(current, dict):
        return any(k not in current or needs_patch(current[k], v) for k, v in desired.items())
    if isinstance(desired, list) and isinstance(current, list) and len(desired) == len(current):
        return any(needs_patch(c, d) for c, d in zip(current, desired, strict=True))
    return bool(current != desired)


class Kube:
    def __init__(self, api: client.ApiClient):
        self.api = api

    @classmethod
    async def connect(cls) -> Kube:
        """In a pod: its service account; elsewhere: the kubeconfig ($KUBECONFIG or ~/.kube/config)."""
        try:
            config.load_incluster_config()
        except config.ConfigException:
            # The client fixes its default path when imported; $KUBECONFIG may be set after that.
            await config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
        return cls(client.ApiClient())

    async def close(self) -> None:
        await self.api.close()

    async def _call(self, method: str, url: str, body: Any = None, query: list | None = None) -> Obj:
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        result = await self.api.call_api(
            url,
            method,
            query_params=query or [],
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
            response_types_map={200: "object", 201: "object", 202: "object"},
            _return_http_data_only=True,
        )
        return result if isinstance(result, dict) else {}

    async def get(self, url: str) -> Obj | None:
        try:
            return await self._call("GET", url)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def items(self, url: str) -> list[Obj]:
        """Every object of a collection."""
        return list((await self._call("GET", url)).get("items") or [])

    async def list(self, url: str, selector: dict[str, str]) -> list[Obj]:
        """Objects of a collection with all of `selector`'s labels (checked here too)."""
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in selector.items()))]
        items = (await self._call("GET", url, query=query)).get("items") or []
        return [
            o for o in items if selector.items() <= ((o.get("metadata") or {}).get("labels") or {}).items()
        ]

    async def patch(self, url: str, body: Obj) -> Obj:
        return await self._call("PATCH", url, body)

    async def delete(self, url: str) -> None:
        try:
            await self._call("DELETE", url)
        except ApiException as e:
            if e.status != 404:
                raise

    async def apply(self, obj: Obj, namespace: str) -> str:
        """Create `obj`, or merge-patch it where it differs; "created", "patched" or "unchanged"."""
        url = path_of(obj, namespace)
        current = await self.get(url)
        if current is None:
            collection = url.rsplit("/", 1)[0]
            try:
                await self._call("POST", collection, obj)
                return "created"
            except ApiException as e:
                if e.status != 409:  # made meanwhile (a repeated event): patch it instead
                    raise
                current = await self.get(url) or {}
        if not needs_patch(current, obj):
            return "unchanged"
        await self.patch(url, obj)
        return "patched"
