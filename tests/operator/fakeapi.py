"""An in-memory Kubernetes API server for the operator's tests: kmock's emulator on loopback, in a
process of its own, so that the operator (kopf in KopfRunner's thread) and the test talk to it over
HTTP as they would to a real API server.

kmock 0.8 needs three fixes for kopf, and one for speed (it keeps every request it served): it
cannot parse the cluster-scoped /api/v1/namespaces path, it fills none of the metadata an API
server adds on create (uid, resourceVersion, generation, creationTimestamp: ownerReferences need
the uid), and it does not bump generation when the spec changes. Nothing here runs pods, fills
their status or collects garbage: tests play the kubelet.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import json
import os
import selectors
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import kmock
from kmock._internal import parsing

from ferrymq.operator.crds import GROUP, KINDS, VERSION

_parse_path = parsing.parse_path
ROOT = Path(__file__).resolve().parents[2]


def _parse_namespaces(path: str) -> parsing.ParsedPath:
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 4:  # the Namespace objects themselves
        return parsing.ParsedPath("", "v1", "namespaces", None, parts[3] if len(parts) == 4 else None, None)
    return _parse_path(path)


parsing.parse_path = _parse_namespaces  # kmock's parser is looked up at call time

REQUESTS_KEPT = 64
BUILTINS = {
    "v1/namespaces": ("Namespace", False),
    "v1/pods": ("Pod", True),
    "v1/services": ("Service", True),
    "v1/events": ("Event", True),
    "apps/v1/statefulsets": ("StatefulSet", True),
    "apps/v1/deployments": ("Deployment", True),
}


class _Emulator(kmock.KubernetesEmulator):
    _versions = itertools.count(1)

    async def _handle(self, request):  # type: ignore[no-untyped-def]
        # kmock keeps every request served, and matches each new one by scanning them all: a
        # request cost grew with the number before it (130 ms after 1,200). Only the last ones are
        # kept (enough for every request in flight to find itself).
        del self._requests[:-REQUESTS_KEPT]
        data = request.data if isinstance(request.data, dict) else None
        if data is not None and request.action == kmock.action.CREATE:
            meta = data.setdefault("metadata", {})
            meta.setdefault("namespace", request.namespace)
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("generation", 1)
            meta.setdefault(
                "creationTimestamp", datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            )
            meta["resourceVersion"] = str(next(self._versions))
        elif data is not None and request.action == kmock.action.UPDATE and request.name:
            meta = data.setdefault("metadata", {})
            meta["resourceVersion"] = str(next(self._versions))
            if "spec" in data and not request.subresource:
                key = (request.resource, request.namespace, request.name)
                current = self.objects[key] if key in self.objects else None  # noqa: SIM401 (no .get)
                generation = (current.get("metadata") or {}).get("generation", 1) if current else 1
                meta["generation"] = int(generation) + 1
        return await super()._handle(request)


async def _serve() -> None:
    emulator = _Emulator()
    for key, (kind, namespaced) in BUILTINS.items():
        emulator.resources[key] = kmock.ResourceInfo(
            kind=kind,
            namespaced=namespaced,
            verbs={"list", "watch", "get", "create", "patch", "delete"},
            subresources={"status"} if kind != "Event" else set(),
        )
    for kind, info in KINDS.items():
        emulator.resources[f"{GROUP}/{VERSION}/{info['plural']}"] = kmock.ResourceInfo(
            kind=kind,
            namespaced=True,
            singular=kind.lower(),
            subresources={"status"},
            verbs={"list", "watch", "get", "create", "patch", "delete"},
        )
    async with emulator, kmock.Server(emulator) as server:
        print(server.port, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until stdin closes


class FakeApi:
    """The emulator serving on 127.0.0.1:<free port> until close(), in a process of its own: as a
    real API server, it then takes no CPU from the operator's or the test's threads (in a thread of
    the test, it shared their interpreter lock and answered slowly while pods started)."""

    def __init__(self, namespace: str):
        self.namespace = namespace
        path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.operator.fakeapi"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": path},
        )
        assert self._process.stdout is not None
        with selectors.DefaultSelector() as output:  # epoll: no FD_SETSIZE bound on the number
            output.register(self._process.stdout, selectors.EVENT_READ)
            ready = output.select(30)
        line = self._process.stdout.readline() if ready else b""
        if not line.strip().isdigit():
            self._process.kill()
            raise RuntimeError("the fake API server did not start")
        self.port = int(line)
        self.url = f"http://127.0.0.1:{self.port}"
        self.create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, "/api/v1/namespaces"
        )

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig that points kopf and kubernetes_asyncio at this server."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": self.namespace}}
            ],
        }
        path.write_text(json.dumps(config))
        return path

    # A small synchronous client for the test's side.
    def request(self, method: str, path: str, body: Any = None) -> dict[str, Any] | None:
        data = None if body is None else json.dumps(body).encode()
        content = "application/merge-patch+json" if method == "PATCH" else "application/json"
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": content}
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def create(self, obj: dict[str, Any], collection: str) -> dict[str, Any]:
        return self.request("POST", collection, obj) or {}

    def get(self, path: str) -> dict[str, Any] | None:
        return self.request("GET", path)

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", path, body) or {}

    def items(self, collection: str) -> list[dict[str, Any]]:
        return list((self.request("GET", collection) or {}).get("items") or [])


if __name__ == "__main__":
    asyncio.run(_serve())
