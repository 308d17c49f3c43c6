"""What the operator's tests share: the fake API's paths, waiting on a condition, making resources."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from ferrymq.operator.crds import GROUP, VERSION, plural
from tests.operator.fakeapi import FakeApi

NS = "ferry"
API = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}"
APPS = f"/apis/apps/v1/namespaces/{NS}"
CORE = f"/api/v1/namespaces/{NS}"
DEADLINE = 20.0


def wait_for(what: str, probe: Callable[[], Any], timeout: float = DEADLINE) -> Any:
    """Poll `probe` until it returns something truthy; fail with `what` after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def create(api: FakeApi, kind: str, name: str, spec: dict[str, Any]) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}, "spec": spec}
    api.create(body, f"{API}/{plural(kind)}")


def condition(api: FakeApi, kind: str, name: str, kind_of: str = "Ready") -> dict[str, Any] | None:
    obj = api.get(f"{API}/{plural(kind)}/{name}") or {}
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind_of), None)
