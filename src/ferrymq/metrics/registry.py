"""Registry: what one process exposes, whatever roles it runs (a broker with its proxy, `ferrymq dev`).

A role plugs in with ``add(collector, ready)``: the collector's ``collect()`` yields
prometheus-client metric families, read at scrape time; ``ready()`` answers None when the role is
ready for traffic, else why not. Families of the same name from several collectors (each role's
RPC latency, say) are merged into one, as the exposition format requires.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from prometheus_client.core import Metric

log = logging.getLogger(__name__)

ReadyCheck = Callable[[], str | None]
"""None when ready, else the reason it is not."""


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


class Registry:
    def __init__(self) -> None:
        self._collectors: list[Collector] = []
        self._checks: list[ReadyCheck] = []
        self.stopping = False
        """Set once the process began to stop: it is no longer ready, whatever the checks say."""

    def add(self, collector: Collector, ready: ReadyCheck | None = None) -> None:
        self._collectors.append(collector)
        if ready is not None:
            self._checks.append(ready)

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for collector in self._collectors:
            try:
                families = list(collector.collect())
            except Exception:  # one broken collector must not take every other metric with it
                log.exception("metrics collector %r failed", collector)
                continue
            for family in families:
                known = merged.get(family.name)
                if known is None:
                    merged[family.name] = family
                else:
                    known.samples.extend(family.samples)
        return iter(merged.values())

    def not_ready(self) -> list[str]:
        """Why the process is not ready (empty when it is)."""
        if self.stopping:
            return ["stopping"]
        reasons = []
        for check in self._checks:
            try:
                reason = check()
            except Exception as exc:
                log.exception("readiness check %r failed", check)
                reason = f"readiness check failed: {type(exc).__name__}: {exc}"
            if reason is not None:
                reasons.append(reason)
        return reasons
