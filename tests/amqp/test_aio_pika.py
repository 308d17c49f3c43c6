"""aio-pika 10.2.1 (its own venv, a subprocess per scenario) against the gateway."""

from __future__ import annotations

import pytest

from tests.amqp.conftest import RABBITMQ, Endpoint, rabbitmq_running, run_scenario

pytestmark = pytest.mark.compat
SCRIPT = "aio_pika_scenarios.py"


def test_session_confirms_channels_by_default(aio_pika_python, gateway):
    """aio-pika puts every channel in confirm mode: confirm.select must be answered."""
    seen = run_scenario(aio_pika_python, SCRIPT, "session", gateway)
    assert seen == {
        "heartbeat": 7,
        "frame_max": 131072,
        "product": "ferrymq",
        "channels": [1, 2, 3, 4],  # aiormq numbers channels upwards
        "closed_channels": [False, True, False, False],
        "closed": True,
    }


def test_wrong_password(aio_pika_python, gateway, rabbitmq):
    ours = run_scenario(aio_pika_python, SCRIPT, "wrong_password", gateway)
    assert ours["error"] == "ProbableAuthenticationError"
    assert ours == run_scenario(aio_pika_python, SCRIPT, "wrong_password", rabbitmq)


def test_passive_declare_of_an_absent_queue_is_a_channel_error(aio_pika_python, gateway):
    assert run_scenario(aio_pika_python, SCRIPT, "passive_declare", gateway) == {
        "error": "ChannelNotFoundEntity",
        "args": ["NOT_FOUND - no queue 'ferrymq-compat-absent-queue' in vhost '/'"],
        "next_channel_open": True,
    }


def test_session_as_rabbitmq(aio_pika_python, gateway, rabbitmq):
    ours = run_scenario(aio_pika_python, SCRIPT, "session", gateway)
    theirs = run_scenario(aio_pika_python, SCRIPT, "session", rabbitmq)
    assert (ours.pop("product"), theirs.pop("product")) == ("ferrymq", "RabbitMQ")
    assert ours == theirs


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        ("rpc", {"replies": [[str(i), f"PING {i}"] for i in range(5)]}),
        ("confirms_and_prefetch", {"confirmed": 200, "in_order": True, "left": 0}),
    ],
)
def test_messaging_as_rabbitmq(aio_pika_python, gateway, scenario, expected):
    """Direct reply-to RPC, a window of confirms and a prefetching consumer: what RabbitMQ 3.10 gives."""
    assert run_scenario(aio_pika_python, SCRIPT, scenario, gateway) == expected
    if rabbitmq_running():
        assert run_scenario(aio_pika_python, SCRIPT, scenario, Endpoint(*RABBITMQ)) == expected
