"""Per-test outcomes from the reports the suites write: JUnit XML from pytest (``--junitxml``), and the
JSON lines of ``node_reporter.js`` from Node's test runner.

A pytest test's id is ``classname::name``. A Node test's id is its describe() names and its own name
joined by `` > `` (the two amqplib files use different top-level names).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

PASSED, FAILED, SKIPPED, NOT_RUN = "passed", "failed", "skipped", "not run"
MESSAGE_LENGTH = 200
EXCEPTION_LINE = re.compile(r"[\w.]*(Error|Exception|Closed\w*|Exit|Interrupt): ")


@dataclass(frozen=True)
class Outcome:
    status: str  # PASSED, FAILED, SKIPPED or NOT_RUN
    message: str = ""  # one line: why it did not pass


class ReportError(ValueError):
    """The report is missing or unreadable."""


def junit(path: Path) -> dict[str, Outcome]:
    """Each test case of pytest's JUnit XML report at `path` by id, in the report's order."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise ReportError(f"no readable JUnit XML report at {path}: {exc}") from None
    found: dict[str, Outcome] = {}
    for case in root.iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = _junit_outcome(case)
        if test_id in found:  # pytest reports a teardown error as a second case of the same test
            outcome = _worse(found[test_id], outcome)
        found[test_id] = outcome
    return found


def _junit_outcome(case: ET.Element) -> Outcome:
    for tag, status in (("failure", FAILED), ("error", FAILED), ("skipped", SKIPPED)):
        detail = case.find(tag)
        if detail is not None:
            return Outcome(status, one_line(_reason(detail.get("message") or detail.text or tag)))
    return Outcome(PASSED)


def _reason(message: str) -> str:
    """The exception line of a message that is itself a traceback (pika's threaded tests raise one)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if lines and lines[0].endswith("Traceback (most recent call last):"):
        return next((line for line in reversed(lines) if EXCEPTION_LINE.match(line)), lines[-1])
    return message


def _worse(first: Outcome, second: Outcome) -> Outcome:
    order = (PASSED, SKIPPED, NOT_RUN, FAILED)
    return first if order.index(first.status) >= order.index(second.status) else second


def node_events(path: Path) -> dict[str, Outcome]:
    """Each test of node_reporter.js's lines at `path` by id.

    Files run one at a time and starts come in the order tests are defined, parents first: a start at
    nesting n follows its describe()s' starts at 0..n-1. A finished test that others started under is a
    describe(), not a test."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ReportError(f"no readable test events at {path}: {exc}") from None
    names: list[str] = []  # the describe() path of the latest start
    parents: set[tuple[str, ...]] = set()
    finished: dict[tuple[str, ...], Outcome] = {}
    for line in lines:
        try:
            event = json.loads(line)
            nesting, name, status = int(event["nesting"]), str(event["name"]), str(event["status"])
        except (ValueError, KeyError, TypeError):  # a line cut short by the run's end
            continue
        if nesting == 0 and name.startswith("/"):  # a file's own entry: the file failed as a whole
            name = Path(name).name
        test = (*names[:nesting], name)
        if status == "started":
            names = list(test)
            parents.add(test[:-1])
        else:
            finished[test] = Outcome(status, one_line(event.get("message", "")))
    return {" > ".join(test): outcome for test, outcome in finished.items() if test not in parents}


def one_line(text: str) -> str:
    """The first non-blank line of `text`, whitespace squeezed, at most MESSAGE_LENGTH characters."""
    line = next((line for line in text.splitlines() if line.strip()), "")
    line = " ".join(line.split())
    return line if len(line) <= MESSAGE_LENGTH else line[: MESSAGE_LENGTH - 3] + "..."
