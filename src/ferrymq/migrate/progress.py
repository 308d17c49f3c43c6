"""Showing the drain: a bar per queue on a terminal, plain periodic lines otherwise (CI logs), and a
final summary either way."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import IO

from ferrymq.migrate.drain import QueueProgress

PLAIN_EVERY_S = 5.0


def _line(p: QueueProgress) -> str:
    remaining = "?" if p.remaining is None else f"{p.remaining:,}"
    extra = ", stored straight into the brokers" if p.direct else ""
    extra += f", {p.redelivered:,} redelivered" if p.redelivered else ""
    extra += f", {p.nacked:,} handed back" if p.nacked else ""
    extra += f": {p.error}" if p.error else ""
    return f"{p.name}: {p.state}, {p.drained:,} moved, {remaining} left, {p.rate():,.0f} msg/s{extra}"


class Display:
    """Updated by `refresh()` (called periodically; `queues` may be set after it is made) and closed
    with `finish()`."""

    def __init__(self, queues: Sequence[QueueProgress], out: IO[str] | None = None, tty: bool | None = None):
        self.queues = queues
        self.out = out or sys.stdout
        self.tty = self.out.isatty() if tty is None else tty
        self._last_plain = 0.0
        self._bars = None
        self._ids: dict[str, object] = {}
        if self.tty:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bars = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[note]}"), TimeElapsedColumn(),
                console=Console(file=self.out, force_terminal=True),
            )  # fmt: skip
            self._bars.start()

    def refresh(self) -> None:
        if self._bars is not None:
            for p in self.queues:
                if p.name not in self._ids:
                    self._ids[p.name] = self._bars.add_task(p.name, total=None, note="")
                total = None if p.remaining is None else p.drained + p.remaining
                note = f"{p.state} {p.rate():,.0f} msg/s" + (f" {p.error}" if p.error else "")
                self._bars.update(self._ids[p.name], completed=p.drained, total=total, note=note)  # type: ignore[arg-type]
            return
        now = time.monotonic()
        if now - self._last_plain >= PLAIN_EVERY_S:
            self._last_plain = now
            for p in self.queues:
                if not p.done:
                    print(_line(p), file=self.out, flush=True)

    def finish(self) -> None:
        if self._bars is not None:
            self.refresh()
            self._bars.stop()
        moved = sum(p.drained for p in self.queues)
        failed = [p for p in self.queues if p.state == "failed"]
        print(f"moved {moved:,} messages from {len(self.queues)} queues", file=self.out)
        for p in self.queues:
            print("  " + _line(p), file=self.out)
        if failed:
            print(f"{len(failed)} queues failed (what was not moved is still in RabbitMQ)", file=self.out)
        self.out.flush()
