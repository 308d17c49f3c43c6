"""Fixtures of the operator's tests: the in-memory API server and the operator running against it."""

from __future__ import annotations

from collections.abc import Iterator

import kopf
import pytest
from kopf.testing import KopfRunner

from ferrymq.operator.context import Settings
from ferrymq.operator.handlers import build_registry
from tests.operator.fakeapi import FakeApi
from tests.operator.helpers import NS


@pytest.fixture
def api(tmp_path, monkeypatch) -> Iterator[FakeApi]:
    server = FakeApi(NS)
    monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(tmp_path / "kubeconfig")))
    yield server
    server.close()


@pytest.fixture
def operator(api) -> Iterator[KopfRunner]:
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    settings.watching.reconnect_backoff = 0.2
    registry = build_registry(Settings(image="ferrymq/ferrymq:test", resync=0.5))
    with KopfRunner(
        ["run", "--standalone", "-n", NS], registry=registry, settings=settings, timeout=30
    ) as runner:
        yield runner
    assert runner.exception is None, runner.output
