"""pika 1.4.4 moves messages through the gateway as through RabbitMQ: each scenario's outcome is
written down as RabbitMQ 3.10 gives it, and where the machine's RabbitMQ runs, it is asked too."""

from __future__ import annotations

import pytest

from tests.amqp.conftest import RABBITMQ, Endpoint, rabbitmq_running, run_scenario

pytestmark = pytest.mark.compat
SCRIPT = "pika_messaging.py"

PREFIX = "<prefix>"
ORDER = ["d9", "g7", "b5", "e5", "h5", "f3", "a1", "c1", "i0"]  # RabbitMQ's order in priority_requeue
EXPECTED = {
    "routing": {
        "q1": ["m0", "m3", "m4"],
        "q2": ["m1", "m4", "m5", "m7", "m8"],
        "q3": ["m3", "m7", "m10"],
    },
    "mandatory_and_errors": {
        "unroutable": ["lost"],
        "redeclare": {
            "code": 406,
            "text": f"PRECONDITION_FAILED - inequivalent arg 'durable' for queue '{PREFIX}-q' in vhost '/': "
            "received 'false' but current is 'true'",
        },
        "absent_exchange": {"code": None},  # pika learns of the close only at its next call
        "absent_queue": {"code": 404, "text": f"NOT_FOUND - no queue '{PREFIX}-absent' in vhost '/'"},
        "bind_absent": {"code": 404, "text": f"NOT_FOUND - no exchange '{PREFIX}-absent' in vhost '/'"},
        "ack_unknown": {"code": 406, "text": "PRECONDITION_FAILED - unknown delivery tag 6"},
        "reserved": {
            "code": 403,
            "text": "ACCESS_REFUSED - exchange name 'amq.mine' contains reserved prefix 'amq.*'",
        },
    },
    "transactions": {"before_commit": 0, "got": ["committed"]},
    "priority_requeue": {  # each requeued message back in its level, ahead of that level's others
        way: {"taken": ["d9", "b5", "e5"], "after": [[body, body in ("d9", "b5", "e5")] for body in ORDER]}
        for way in ("nack", "close")
    },
    "handed_back_at_once": {"rounds": [["m2", True]] * 8},
    "acks_and_redelivery": {  # what was handed back comes first, marked redelivered
        "count": 6,
        "prefetched": 2,
        "after_close": [["m1", True], ["m2", True], ["m3", False], ["m4", False], ["m5", False]],
    },
    "queue_arguments": {
        "delayed": [
            "later",
            {
                "x-death": [
                    {
                        "count": 1,
                        "reason": "expired",
                        "queue": f"{PREFIX}-delay",
                        "exchange": "",
                        "routing-keys": [f"{PREFIX}-delay"],
                    }
                ],
                "x-first-death-exchange": "",
                "x-first-death-queue": f"{PREFIX}-delay",
                "x-first-death-reason": "expired",
            },
        ],
        "expired_get": True,
        "rejected": ["bad", "rejected", 1],
        "drop_head": ["s2", "s3"],
        "reject_publish": ["ack", "nack"],
        "priority_order": ["p5", "p3", "p1", "p0"],
        "unused_queue_expired": 404,
    },
    "queue_lifecycle": {
        "declared": 3,
        "purged": 3,
        "deleted": 1,
        "locked": {
            "code": 405,
            "text": "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue "
            f"'{PREFIX}-exclusive' in vhost '/'. It could be originally declared on another connection "
            "or the exclusive property value does not match that of the original declaration.",
        },
        "exclusive_after_close": {
            "code": 404,
            "text": f"NOT_FOUND - no queue '{PREFIX}-exclusive' in vhost '/'",
        },
        "auto_delete_after_cancel": {
            "code": 404,
            "text": f"NOT_FOUND - no queue '{PREFIX}-auto' in vhost '/'",
        },
        "cancelled": ["watcher"],
    },
}


def outcomes(pika_python, scenario: str, gateway: Endpoint) -> tuple[dict, dict | None]:
    """(the gateway's outcome, RabbitMQ's where it runs)."""
    ours = run_scenario(pika_python, SCRIPT, scenario, gateway)
    theirs = run_scenario(pika_python, SCRIPT, scenario, Endpoint(*RABBITMQ)) if rabbitmq_running() else None
    return ours, theirs


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_outcome_as_rabbitmq(pika_python, gateway, scenario):
    ours, theirs = outcomes(pika_python, scenario, gateway)
    assert ours == EXPECTED[scenario]
    if theirs is not None:
        assert theirs == EXPECTED[scenario]


def test_every_property_and_header_type_round_trips(pika_python, gateway):
    ours, theirs = outcomes(pika_python, "properties_round_trip", gateway)
    assert ours["properties"]["headers"]["table"] == {"nested": "yes"}
    assert ours["properties"]["expiration"] == "60000"
    if theirs is not None:
        ours.pop("key"), theirs.pop("key")  # the queue names differ by their random part
        assert ours == theirs


def test_two_gateways_share_one_cluster_and_one_metadata_service(pika_python, two_gateways):
    first, second = two_gateways
    assert run_scenario(pika_python, SCRIPT, "two_gateways", first, str(second.port)) == {
        "moved": ["o0", "o1", "o2"],
        "replies": ["pong"],
        "cancelled": ["eu-watcher"],
    }


def test_declarations_route_publishes_through_another_gateway_at_once(pika_python, two_gateways):
    first, second = two_gateways
    assert run_scenario(pika_python, SCRIPT, "declared_elsewhere", first, str(second.port)) == {
        "routed": 20,
        "returned": 0,
        "no_exchange": 0,
        "got": [f"m{i}" for i in range(20)],
    }


def test_what_the_gateway_adds_to_rabbitmq(pika_python, gateway):
    assert run_scenario(pika_python, SCRIPT, "ferrymq_extras", gateway) == {
        "past_max_retries": ["last job", "rejected"],
        "graded_back_at_once": False,  # RabbitMQ would give it back at once; here after 10 s
        "broadcast": [["n0", "n1", "n2"], ["n0", "n1", "n2"]],
        "too_big": {
            "code": 406,
            "text": "PRECONDITION_FAILED - message size 4194305 is larger than configured max size 4194304",
        },
    }
