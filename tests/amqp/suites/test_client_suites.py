"""Each published client suite against the gateway from this checkout: every test that passes on
RabbitMQ 3.10 (baseline.toml) passes here too, except those listed in expected_failures.toml, and none
of those passes (else it must leave the list)."""

from __future__ import annotations

import pytest

from tests.amqp.suites import brokers, ledger, runner
from tests.amqp.suites.catalog import SUITES

SETUP_ALLOWANCE = 600  # seconds beyond the suite's own limit: building its environment on first use


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            name, marks=[pytest.mark.amqp_suites, pytest.mark.timeout(suite.suite_timeout + SETUP_ALLOWANCE)]
        )
        for name, suite in SUITES.items()
    ],
)
def test_suite_on_gateway_as_on_rabbitmq(name, tmp_path):
    suite = SUITES[name]
    if suite.fixed_port and (why := brokers.namespace_problem()):
        pytest.skip(f"{name} dials 127.0.0.1:5672 and meets the gateway only in a network namespace: {why}")
    baseline = ledger.read_baselines()[name]
    with brokers.gateway(tmp_path, suite.fixed_port) as target:
        done = runner.run(suite, target, tmp_path)
    found = ledger.problems(baseline, ledger.read_expected().get(name, {}), done)
    assert not found, f"{done.summary()}\n" + "\n".join(found) + f"\noutput:\n{runner.tail(done.log)}"
