"""Importing RabbitMQ's definitions: a committed export and, when rabbitmqctl runs here, the live
RabbitMQ's own export (read-only)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ferrymq.meta.access import verify_password
from ferrymq.meta.definitions import export_definitions, import_definitions

SAMPLE = Path(__file__).parent / "data" / "definitions.json"


def live_export() -> dict:
    """`rabbitmqctl export_definitions -` of the machine's RabbitMQ, or a skip saying why not."""
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not installed")
    try:
        done = subprocess.run(
            ["rabbitmqctl", "export_definitions", "-"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"rabbitmqctl cannot run: {exc}")
    if done.returncode != 0:
        pytest.skip(f"rabbitmqctl export_definitions failed: {done.stderr.strip()[:200]}")
    return json.loads(done.stdout)


def test_sample_imports_with_a_clear_report_and_idempotently(store):
    doc = json.loads(SAMPLE.read_text())
    report = import_definitions(store, doc)
    assert report.kinds["vhosts"].created == 1 and report.kinds["vhosts"].unchanged == 1
    assert report.kinds["queues"].created == 2
    assert report.kinds["exchanges"].created == 2
    assert report.kinds["exchanges"].problems == [
        "exchange 'delayed' in vhost 'shop': type 'x-delayed-message' is not supported"
    ]
    assert report.kinds["bindings"].created == 3
    assert report.kinds["parameters"].problems and report.kinds["global_parameters"].problems
    assert "queues: 2 created, 0 updated, 0 unchanged" in report.summary()

    snap = store.snapshot("shop")
    assert {q.name: q.topic for q in snap.queues} == {
        "orders.created": "AMQP-shop-orders_2ecreated",
        "orders.dead": "AMQP-shop-orders_2edead",
    }
    assert snap.policies[0].apply_to == "queues" and snap.policies[0].definition["message-ttl"] == 60000
    assert store.user("shop").tags == ["management", "monitoring"]
    assert verify_password("guest", store.user("guest").password_hash)

    version = store.version("shop")
    again = import_definitions(store, doc)
    assert again.changed == 0
    assert store.version("shop") == version

    exported = export_definitions(store)
    assert import_definitions(store, exported).changed == 0
    assert {(b["source"], b["destination"]) for b in exported["bindings"]} == {
        ("orders", "orders.created"),
        ("dlx", "orders.dead"),
        ("orders", "dlx"),
    }


def test_conflicts_are_reported_and_the_rest_imported(store):
    doc = json.loads(SAMPLE.read_text())
    import_definitions(store, doc)
    doc["queues"][0]["durable"] = False
    report = import_definitions(store, doc)
    assert report.kinds["queues"].problems == [
        "inequivalent arg 'durable' for queue 'orders.created' in vhost 'shop': "
        "received 'false' but current is 'true'"
    ]
    assert report.kinds["queues"].unchanged == 1


def test_the_live_rabbitmq_export_imports(store):
    doc = live_export()
    report = import_definitions(store, doc)
    assert not [p for k in ("vhosts", "users", "permissions", "queues") for p in report.kind(k).problems]
    assert {v.name for v in store.vhosts()} >= {v["name"] for v in doc["vhosts"]}
    for user in doc["users"]:
        assert store.user(user["name"]).password_hash == user["password_hash"]
    assert import_definitions(store, doc).changed == 0
