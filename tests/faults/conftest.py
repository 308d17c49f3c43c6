"""Fault suite fixtures: a controller-mode cluster of real processes (see ferrymq.bench.processes)."""

from __future__ import annotations

import pytest

from ferrymq.bench.processes import ProcessCluster, netns_available


@pytest.fixture
async def fault_cluster(tmp_path):
    """Start a ProcessCluster (NameServer, three controllers, a group of three brokers); stop it after."""
    started: list[ProcessCluster] = []

    async def start(**options) -> ProcessCluster:
        cluster = ProcessCluster(tmp_path / f"cluster{len(started)}", **options)
        started.append(cluster)
        await cluster.start()
        return cluster

    yield start
    for cluster in started:
        await cluster.stop()


@pytest.fixture
def netns():
    available, why = netns_available()
    if not available:
        pytest.skip(f"network partitions need namespaces: {why} (the SIGSTOP variant runs instead)")
