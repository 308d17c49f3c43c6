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


def _run_operator(resync: float) -> Iterator[KopfRunner]:
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    settings.watching.reconnect_backoff = 0.2
    registry = build_registry(Settings(image="ferrymq/ferrymq:test", resync=resync))
    with KopfRunner(
        ["run", "--standalone", "-n", NS], registry=registry, settings=settings, timeout=30
    ) as runner:
        yield runner
    assert runner.exception is None, runner.output


@pytest.fixture
def operator(api) -> Iterator[KopfRunner]:
    yield from _run_operator(resync=0.5)


@pytest.fixture
def operator_without_resync(api) -> Iterator[KopfRunner]:
    """An operator whose resync never comes within a test: only events move it."""
    yield from _run_operator(resync=3600)
