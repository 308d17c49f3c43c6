"""Run one suite against one broker and read back what happened to each test.

Time is bounded twice: each test by the suite's own runner (pytest-timeout, ``node_test_timeouts.js``)
and the whole run by `Suite.suite_timeout`. At that limit the run gets SIGINT, on which pytest still
writes its report (``node_reporter.js`` has written each result as it came); the tests it did not reach
count as not run. The suite runs in a process group of
its own, which is killed (by its id) when the run ends, so no client process outlives it; the suite's
main process also dies with the harness.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ferrymq.bench.processes import _die_with_parent
from tests.amqp.suites import brokers, reports
from tests.amqp.suites.catalog import Suite
from tests.amqp.suites.reports import Outcome

INTERRUPT_GRACE = 30.0  # seconds a suite gets after SIGINT to write its report
OUTPUT_TAIL = 4000


@dataclass
class SuiteRun:
    suite: Suite
    target: brokers.Target
    outcomes: dict[str, Outcome]
    seconds: float
    cut_short: bool  # the suite's time limit ended it
    log: Path

    def count(self, status: str) -> int:
        return sum(outcome.status == status for outcome in self.outcomes.values())

    def summary(self) -> str:
        counts = ", ".join(
            f"{self.count(status)} {status}"
            for status in (reports.PASSED, reports.FAILED, reports.SKIPPED)
            if self.count(status)
        )
        limit = f", stopped at its {self.suite.suite_timeout:.0f} s limit" if self.cut_short else ""
        where = f"{self.suite.name} on {self.target.version}"
        return f"{where}: {counts or 'no tests'} in {self.seconds:.1f} s{limit}"

    def outcome(self, test_id: str) -> Outcome:
        if test_id in self.outcomes:
            return self.outcomes[test_id]
        why = (
            f"stopped at the suite's {self.suite.suite_timeout:.0f} s limit"
            if self.cut_short
            else "not reported"
        )
        return Outcome(reports.NOT_RUN, why)


def run(suite: Suite, target: brokers.Target, workdir: Path) -> SuiteRun:
    """`suite` against `target`; its files and output go under `workdir` (which must exist)."""
    log = workdir / "output.txt"
    invocation = suite.prepare(workdir, target.host, target.port, suite.test_timeout)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(invocation.env)
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*target.prefix, *invocation.argv],
            cwd=invocation.cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    cut_short = False
    try:
        proc.wait(suite.suite_timeout)
    except subprocess.TimeoutExpired:
        cut_short = True
        _signal_group(proc.pid, signal.SIGINT)
        try:
            proc.wait(INTERRUPT_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    finally:
        _signal_group(proc.pid, signal.SIGKILL)  # what the suite started and left running
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    seconds = time.monotonic() - started
    try:
        outcomes = suite.read(invocation.report)
    except reports.ReportError as exc:
        if not cut_short:
            raise reports.ReportError(f"{exc}\n{suite.name} exited {proc.returncode}:\n{tail(log)}") from None
        outcomes = {}
    return SuiteRun(suite, target, outcomes, seconds, cut_short, log)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-OUTPUT_TAIL:]
    except OSError as exc:
        return f"({exc})"
