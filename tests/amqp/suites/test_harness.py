"""The suite harness's own logic, without brokers: reading reports, the rule, and the committed files."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.amqp.suites import brokers, ledger, reports
from tests.amqp.suites.catalog import SUITES
from tests.amqp.suites.reports import FAILED, NOT_RUN, PASSED, SKIPPED, Outcome
from tests.amqp.suites.runner import SuiteRun

PYTEST_XML = """<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests"><testsuite name="pytest">
<testcase classname="t.integration.test_rmq" name="test_connect[plain]" time="0.005" />
<testcase classname="t.integration.test_rmq" name="test_get" time="0.1">
  <failure message="amqp.exceptions.NotFound: (404)&#10;second line">trace</failure></testcase>
<testcase classname="t.integration.test_rmq" name="test_get" time="0.1">
  <error message="teardown went wrong">trace</error></testcase>
<testcase classname="t.integration.test_rmq" name="test_tls" time="0">
  <skipped message="no certs" /></testcase>
<testcase classname="tests.acceptance.async_adapter_tests.TestA" name="test_with_asyncio" time="1">
  <failure message="AssertionError: Traceback (most recent call last):&#10;  File &quot;x.py&quot;, line 1
&#10;pika.exceptions.ChannelClosedByBroker: (540, 'NOT_IMPLEMENTED')&#10;">trace</failure></testcase>
</testsuite></testsuites>
"""


def test_junit_outcomes(tmp_path):
    path = tmp_path / "report.xml"
    path.write_text(PYTEST_XML)
    assert reports.junit(path) == {
        "t.integration.test_rmq::test_connect[plain]": Outcome(PASSED),
        "t.integration.test_rmq::test_get": Outcome(FAILED, "amqp.exceptions.NotFound: (404)"),
        "t.integration.test_rmq::test_tls": Outcome(SKIPPED, "no certs"),
        "tests.acceptance.async_adapter_tests.TestA::test_with_asyncio": Outcome(
            FAILED, "pika.exceptions.ChannelClosedByBroker: (540, 'NOT_IMPLEMENTED')"
        ),
    }


def _events(path: Path, *lines: tuple[int, str, str]) -> Path:
    path.write_text(
        "".join(
            json.dumps({"nesting": n, "name": name, "status": status}) + "\n" for n, name, status in lines
        )
    )
    return path


def test_node_events_name_tests_by_their_describes(tmp_path):
    path = _events(
        tmp_path / "events.jsonl",
        (0, "API", "started"),
        (1, "connect", "started"),
        (2, "at all", "started"),
        (2, "at all", "passed"),
        (1, "connect", "passed"),
        (1, "errors", "started"),
        (2, "throws", "started"),
        (2, "throws", "failed"),
        (2, "hangs", "started"),  # the file dies here: no end for it, its describe() or the top one
        (0, "/tmp/x/test/callback_api.test.js", "failed"),
        (0, "connect", "started"),
        (1, "at all", "started"),
        (1, "at all", "passed"),
        (0, "connect", "passed"),
    )
    with path.open("a") as out:
        out.write('{"nesting": 1, "name": "cut sh')  # the run ended mid-line
    assert {test: outcome.status for test, outcome in reports.node_events(path).items()} == {
        "API > connect > at all": PASSED,
        "API > errors > throws": FAILED,
        "callback_api.test.js": FAILED,
        "connect > at all": PASSED,
    }


def _run(outcomes: dict[str, Outcome], cut_short: bool = False) -> SuiteRun:
    return SuiteRun(
        SUITES["py-amqp"], brokers.Target("gateway", "h", 1), outcomes, 1.0, cut_short, Path("log")
    )


def test_the_rule():
    baseline = ledger.Baseline("RabbitMQ 3.10.8", "2026-11-25", ["a", "b", "c", "d", "e"])
    expected = {"b": "540", "c": "540", "z": "540", "e": "unstable: a race"}
    run = _run(
        {
            "a": Outcome(FAILED, "boom"),
            "b": Outcome(PASSED),
            "c": Outcome(FAILED, "540"),
            "e": Outcome(PASSED),
        }
    )
    assert ledger.problems(baseline, expected, run) == [
        "a: passes on RabbitMQ 3.10.8 but failed: boom",
        "d: passes on RabbitMQ 3.10.8 but not run: not reported",
        "b: now passes, remove it from expected_failures.toml",
        "z: listed in expected_failures.toml but not a passing test of the baseline",
    ]
    assert ledger.refreshed(baseline, expected, run) == {
        "a": "failed: boom",
        "c": "failed: 540",
        "d": "not run: not reported",
        "e": "unstable: a race",
    }
    everything_listed = {"a": "x", "b": "x", "c": "x", "d": "x", "e": "x"}
    assert ledger.problems(baseline, everything_listed, _run({}, cut_short=True)) == []
    assert ledger.failing(baseline, _run({"a": Outcome(PASSED)}, cut_short=True))["b"] == (
        f"{NOT_RUN}: stopped at the suite's 120 s limit"
    )


def test_files_round_trip(tmp_path):
    odd = 'q"uote\\back\tslash \x7f ünï > [x]::y'
    baselines = {
        "py-amqp": ledger.Baseline("RabbitMQ 3.10.8", "2026-11-25", [odd, "b"], {"c": f"failed: {odd}"})
    }
    ledger.write_baselines(baselines, tmp_path / "b.toml")
    assert ledger.read_baselines(tmp_path / "b.toml") == baselines
    expected = {"pika": {odd: odd}, "kombu": {}}
    ledger.write_expected(expected, tmp_path / "e.toml")
    assert ledger.read_expected(tmp_path / "e.toml") == expected


def test_committed_files_cover_every_suite():
    baselines, expected = ledger.read_baselines(), ledger.read_expected()
    assert set(baselines) == set(SUITES)
    for name, tests in expected.items():
        assert set(tests) <= set(baselines[name].passed), name


def test_names_the_suites_leave_on_rabbitmq_are_theirs():
    """Names seen after runs on RabbitMQ 3.10.8 are matched; one another client declared meanwhile is not."""
    left = {
        "kombu": [
            "test",
            "test_ack",
            "test-queue-38be7ab7",
            "revive_inactive_fba9",
            "ttl_test",
            "rk_direct2",
        ],
        "py-amqp": ["py-amqp-unittest"],
        "pika": ["TestBasicGet_q0f3a", "q-TestZ_PublishAndConsumeBig:9e1c"],
        "amqplib": ["test.cb.bindq", "test.unbind-ex-source"],
    }
    for name, names in left.items():
        declares = re.compile(SUITES[name].declares)
        assert all(declares.fullmatch(n) for n in names), name
        assert not declares.fullmatch("bench-migrate-97216a63"), name
