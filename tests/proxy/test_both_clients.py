"""What the official 5.x clients do alike through our proxy, run with each (the Python client and the
Node.js one, in local and cluster mode): an unacked message comes back as attempt 2 and acks once;
a change of invisible duration brings a message back after it; a committed transaction is delivered
and a rolled-back one never."""

from __future__ import annotations

import time

import pytest

from tests.proxy.conftest import ClientDriver, receive_until

pytestmark = pytest.mark.compat


@pytest.fixture(params=["client", "node"])
def either(request) -> ClientDriver:
    """The Python client's driver, then the Node client's."""
    return request.getfixturevalue(request.param)


def test_an_unacked_message_comes_back_with_attempt_two_and_acks_once(proxied, either):
    proxied.create_topic("Jobs", 1)
    either.ok("producer", topics=["Jobs"])
    sent = either.ok("send", topic="Jobs", body="job")["id"]
    either.ok("consumer", group="Workers", topic="Jobs", await_s=5)
    first = either.ok("receive", max=1, invisible_s=10)["messages"]
    assert [(m["id"], m["attempt"]) for m in first] == [(sent, 1)]
    started = time.monotonic()
    again = receive_until(either, bool, invisible_s=10)
    assert [(m["id"], m["attempt"], m["body"]) for m in again] == [(sent, 2, "job")], proxied.describe()
    assert time.monotonic() - started >= 9  # not before its invisible time ended
    either.ok("ack", id=sent)
    stale = either.call("ack", id=sent)  # acked already: the handle is no longer current
    assert not stale["ok"] and stale["error"] == "BadRequestException", stale


def test_change_invisible_duration_brings_the_message_back_after_it(proxied, either):
    proxied.create_topic("Tasks", 1)
    either.ok("producer", topics=["Tasks"])
    sent = either.ok("send", topic="Tasks", body="task")["id"]
    either.ok("consumer", group="Runners", topic="Tasks", await_s=5)
    (m,) = either.ok("receive", max=1, invisible_s=60)["messages"]
    changed = either.ok("change", id=sent, invisible_s=2)
    assert changed["handle"] != m["handle"]
    back = receive_until(either, bool)
    assert [(b["id"], b["body"], b["attempt"]) for b in back] == [(sent, "task", 2)], proxied.describe()
    either.ok("ack", id=sent)  # with the handle of the latest copy


def test_a_transactional_message_is_delivered_when_committed_and_never_when_rolled_back(proxied, either):
    proxied.create_topic("Transfers", 1, "TRANSACTION")
    either.ok("producer", topics=["Transfers"])
    dropped = either.ok("send", topic="Transfers", body="dropped", transaction="rollback")["id"]
    kept = either.ok("send", topic="Transfers", body="kept", transaction="commit")["id"]
    # a marker: once it is here, so are the ended ones (a transaction too: the topic takes no other)
    either.ok("send", topic="Transfers", body="after", transaction="commit")
    either.ok("consumer", group="Auditors", topic="Transfers", await_s=5)
    got = receive_until(either, lambda got: "after" in [m["body"] for m in got])
    assert sorted(m["body"] for m in got) == ["after", "kept"], proxied.describe()
    assert kept in [m["id"] for m in got] and dropped not in [m["id"] for m in got]
