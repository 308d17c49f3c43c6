"""python -m tests.amqp.suites {baseline,refresh-expected,run} [SUITE ...]

  baseline            run the suites against the machine's RabbitMQ and rewrite their part of baseline.toml
  refresh-expected    run them against the gateway and rewrite their part of expected_failures.toml
                      (--allow-new lets a test onto the list; without it the list may only shrink)
  run                 run them against the gateway (or --against rabbitmq) and print what the test would say

Run it from the repository root with the project's venv (ferrymq importable).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.amqp.suites import brokers, ledger, runner
from tests.amqp.suites.catalog import SUITES, Suite


@contextlib.contextmanager
def target(against: str, suite: Suite, workdir: Path) -> Iterator[brokers.Target]:
    if against == "rabbitmq":
        with brokers.rabbitmq(suite.declares) as found:
            yield found
    else:
        with brokers.gateway(workdir, suite.fixed_port) as found:
            yield found


def run_one(suite: Suite, against: str, keep: Path | None) -> runner.SuiteRun:
    with contextlib.ExitStack() as stack:
        workdir = keep or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix=f"suite-{suite.name}-"))
        )
        if keep:
            shutil.rmtree(keep, ignore_errors=True)
        workdir.mkdir(parents=True, exist_ok=True)
        with target(against, suite, workdir) as where:
            done = runner.run(suite, where, workdir)
        print(done.summary(), flush=True)
        return done


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.amqp.suites", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["baseline", "refresh-expected", "run"])
    parser.add_argument(
        "suites", nargs="*", metavar="SUITE", help=f"any of {', '.join(SUITES)} (default: all)"
    )
    parser.add_argument("--against", choices=["gateway", "rabbitmq"], default="gateway", help="for run")
    parser.add_argument("--allow-new", action="store_true", help="refresh-expected may add tests")
    parser.add_argument("--keep", type=Path, help="keep reports and logs in this folder")
    args = parser.parse_args(argv)
    if unknown := set(args.suites) - set(SUITES):
        parser.error(f"no suite called {', '.join(sorted(unknown))}; there are {', '.join(SUITES)}")
    chosen = [SUITES[name] for name in (args.suites or SUITES)]
    if args.command == "baseline":
        return baseline(chosen, args.keep)
    if args.command == "refresh-expected":
        return refresh(chosen, args.allow_new, args.keep)
    return show(chosen, args.against, args.keep)


def baseline(chosen: list[Suite], keep: Path | None) -> int:
    baselines = ledger.read_baselines()
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    for suite in chosen:
        baselines[suite.name] = ledger.baseline_of(run_one(suite, "rabbitmq", _sub(keep, suite)), today)
    ledger.write_baselines(baselines)
    print(f"wrote {ledger.BASELINE}")
    return 0


def refresh(chosen: list[Suite], allow_new: bool, keep: Path | None) -> int:
    baselines, expected = ledger.read_baselines(), ledger.read_expected()
    status = 0
    for suite in chosen:
        listed = expected.get(suite.name, {})
        failing = ledger.refreshed(
            baselines[suite.name], listed, run_one(suite, "gateway", _sub(keep, suite))
        )
        new = sorted(set(failing) - set(listed))
        if new and not allow_new:
            print(f"{suite.name}: not rewritten, these would join the list (--allow-new to accept):")
            print("\n".join(f"  {test}: {failing[test]}" for test in new))
            status = 1
            continue
        gone = set(listed) - set(failing)
        print(f"{suite.name}: {len(failing)} listed, {len(gone)} removed, {len(new)} added")
        expected[suite.name] = failing
    ledger.write_expected(expected)
    print(f"wrote {ledger.EXPECTED}")
    return status


def show(chosen: list[Suite], against: str, keep: Path | None) -> int:
    baselines, expected = ledger.read_baselines(), ledger.read_expected()
    status = 0
    for suite in chosen:
        done = run_one(suite, against, _sub(keep, suite))
        if against == "gateway":
            found = ledger.problems(baselines[suite.name], expected.get(suite.name, {}), done)
            print("\n".join(f"  {line}" for line in found) or "  as expected")
            status |= bool(found)
    return status


def _sub(keep: Path | None, suite: Suite) -> Path | None:
    return keep / suite.name if keep else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
