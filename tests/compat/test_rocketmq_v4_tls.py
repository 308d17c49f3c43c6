"""PyPI rocketmq==0.4.4 has no TLS: its librocketmq links no TLS library and its C API has no TLS
setting. Against a cluster serving TLS it connects in plaintext, which RocketMQ's permissive mode
accepts on the same ports, while our SDK speaks TLS to the same NameServer and broker."""

from __future__ import annotations

import pytest

from ferrymq.client import ClientTLS
from ferrymq.client.sync import Message, Producer
from tests.compat.conftest import V4Clients, running_cluster
from tests.pki import pki, server_args  # noqa: F401  (fixture)

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]


def test_the_cpp_client_in_plaintext_beside_tls_on_a_permissive_cluster(rocketmq_v4_python, pki, tmp_path):  # noqa: F811
    with running_cluster(tmp_path, server_args(pki, "permissive")) as cluster:
        v4 = V4Clients(rocketmq_v4_python, cluster, tmp_path / "clients")
        try:
            sent = v4.produce("Mixed", 10, prefix="plain")
            assert {s["status"] for s in sent} == {"OK"}
            with Producer(
                "tls-producer", cluster.namesrv, tls=ClientTLS(trust_cert_path=str(pki.ca.cert))
            ) as producer:
                for i in range(10):
                    producer.send(Message("Mixed", f"sealed-{i}".encode()))
            consumer = v4.consumer("Mixed", "readers", label="reader", count=20, timeout=60)
            consumer.wait_exit()
            got = {m["body"] for m in consumer.messages}
            assert got == {f"plain-{i}" for i in range(10)} | {f"sealed-{i}" for i in range(10)}
        finally:
            v4.close()
