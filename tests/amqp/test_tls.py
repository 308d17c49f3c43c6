"""pika 1.4.4 (its own venv) over TLS to the gateway: an AMQPS port that takes TLS only, beside the
AMQP port following tls_server_mode (permissive: both, enforcing: TLS only). Ports are ephemeral."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.net.tls import ServerTLS
from tests.amqp.conftest import Endpoint, run_scenario
from tests.pki import pki  # noqa: F401  (fixture)

pytestmark = pytest.mark.compat
SCRIPT = "pika_scenarios.py"


def tls(pki, mode: str) -> ServerTLS:  # noqa: F811
    return ServerTLS(mode, str(pki.server.cert), str(pki.server.key), handshake_timeout=2.0)


async def pika(python, port: int, *ca) -> dict:
    return await asyncio.to_thread(
        run_scenario, python, SCRIPT, "round_trip", Endpoint("127.0.0.1", port), *ca
    )


async def test_amqps_and_a_permissive_amqp_port(make_local_gateway, pika_python, pki):  # noqa: F811
    local = await make_local_gateway(tls=tls(pki, "permissive"), tls_port=0)
    amqps = local.server.tls_port
    assert amqps not in (None, 5671, local.port)
    ca = str(pki.ca.cert)
    assert await pika(pika_python, amqps, ca) == {"body": "sealed", "tls": "TLSv1.3"}
    assert await pika(pika_python, local.port, ca) == {"body": "sealed", "tls": "TLSv1.3"}
    assert await pika(pika_python, local.port) == {"body": "sealed", "tls": None}  # permissive
    refused = await pika(pika_python, amqps)  # plaintext on the AMQPS port
    assert refused["error"] in ("AMQPConnectionError", "StreamLostError", "IncompatibleProtocolError"), (
        refused
    )


async def test_enforcing_refuses_plaintext_and_strangers(make_local_gateway, pika_python, pki):  # noqa: F811
    local = await make_local_gateway(tls=tls(pki, "enforcing"))
    assert await pika(pika_python, local.port, str(pki.ca.cert)) == {"body": "sealed", "tls": "TLSv1.3"}
    plaintext = await pika(pika_python, local.port)
    assert plaintext["error"] in ("AMQPConnectionError", "StreamLostError", "IncompatibleProtocolError"), (
        plaintext
    )
    stranger = await pika(pika_python, local.port, str(pki.other_ca.cert))
    assert stranger["error"] == "SSLCertVerificationError", stranger
    assert "CERTIFICATE_VERIFY_FAILED" in stranger["message"], stranger
    assert await pika(pika_python, local.port, str(pki.ca.cert)) == {"body": "sealed", "tls": "TLSv1.3"}
