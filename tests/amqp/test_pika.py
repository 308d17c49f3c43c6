"""pika 1.4.4 (its own venv, a subprocess per scenario) against the gateway, and where the machine's
RabbitMQ runs, against it too: the client must see the same thing from both."""

from __future__ import annotations

import pytest

from tests.amqp.conftest import run_scenario

pytestmark = pytest.mark.compat
SCRIPT = "pika_scenarios.py"


def test_session_negotiates_and_opens_and_closes_channels(pika_python, gateway):
    seen = run_scenario(pika_python, SCRIPT, "session", gateway)
    assert seen == {
        "heartbeat_default": 60,  # the server's offer when the client asks for none
        "heartbeat_asked": 7,  # the lower of both
        "frame_max": 131072,
        "channels": [1, 2, 3, 2],  # a closed channel's number is handed out again
        "open": [True, False, True, True],
        "closed": True,
    }


def test_wrong_password_is_access_refused(pika_python, gateway):
    seen = run_scenario(pika_python, SCRIPT, "wrong_password", gateway)
    assert seen["error"] == "ProbableAuthenticationError"
    assert (
        "(403) 'ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN." in seen["message"]
    )


def test_absent_vhost_is_not_allowed(pika_python, gateway):
    seen = run_scenario(pika_python, SCRIPT, "absent_vhost", gateway)
    assert seen == {
        "error": "ProbableAccessDeniedError",
        "message": "ConnectionClosedByBroker: (530) 'NOT_ALLOWED - vhost ferrymq-compat-absent not found'",
    }


def test_passive_declare_of_an_absent_queue_closes_only_the_channel(pika_python, gateway):
    seen = run_scenario(pika_python, SCRIPT, "passive_declare", gateway)
    assert seen == {
        "error": "ChannelClosedByBroker",
        "code": 404,
        "text": "NOT_FOUND - no queue 'ferrymq-compat-absent-queue' in vhost '/'",
        "channel_open": False,
        "connection_open": True,
        "next_channel_open": True,
    }


def test_heartbeats_keep_an_idle_connection(pika_python, gateway):
    assert run_scenario(pika_python, SCRIPT, "heartbeats", gateway) == {"open": True}


@pytest.mark.parametrize(
    "scenario", ["session", "wrong_password", "absent_vhost", "heartbeats", "passive_declare"]
)
def test_same_as_rabbitmq(pika_python, gateway, rabbitmq, scenario):
    assert run_scenario(pika_python, SCRIPT, scenario, gateway) == run_scenario(
        pika_python, SCRIPT, scenario, rabbitmq
    )
