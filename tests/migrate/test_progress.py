"""The drain's display: bars on a terminal, plain lines otherwise, and the summary either way."""

from __future__ import annotations

import io

from ferrymq.migrate.drain import QueueProgress
from ferrymq.migrate.progress import Display


def _queues() -> list[QueueProgress]:
    moving = QueueProgress("orders", state="draining", drained=1500, remaining=500, redelivered=3)
    failed = QueueProgress("audit", state="failed", drained=10, remaining=90, error="queue is gone")
    return [moving, failed]


def test_plain_lines_without_a_terminal_then_a_summary() -> None:
    out = io.StringIO()
    display = Display([], out, tty=False)
    display.queues = _queues()  # set once the drains exist
    display.refresh()
    display.finish()
    text = out.getvalue()
    assert "orders: draining, 1,500 moved, 500 left" in text and "3 redelivered" in text
    assert "moved 1,510 messages from 2 queues" in text
    assert "audit: failed, 10 moved, 90 left" in text and "queue is gone" in text
    assert "1 queues failed" in text


def test_bars_on_a_terminal() -> None:
    out = io.StringIO()
    display = Display([], out, tty=True)
    display.queues = _queues()
    display.refresh()
    display.finish()
    text = out.getvalue()
    assert "orders" in text and "1500/2000" in text
    assert "moved 1,510 messages from 2 queues" in text
