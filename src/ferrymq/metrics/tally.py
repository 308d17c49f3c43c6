"""Tally: message and byte counts by key, kept as plain ints on the hot path.

A server adds to a tally where a message passes (a put, a pull, a pop); a collector reads it when
Prometheus scrapes. Adding is one dict lookup and two integer additions, never a call into
prometheus-client, so an unscraped server pays next to nothing.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Tally(Generic[K]):
    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[K, list[int]] = {}
        """key → [messages, bytes]"""

    def add(self, key: K, messages: int, size: int) -> None:
        counts = self.counts.get(key)
        if counts is None:
            self.counts[key] = [messages, size]
        else:
            counts[0] += messages
            counts[1] += size

    def items(self) -> list[tuple[K, int, int]]:
        """(key, messages, bytes) of every key, as a copy: a scrape never sees a dict change size."""
        return [(key, counts[0], counts[1]) for key, counts in list(self.counts.items())]

    def total(self) -> tuple[int, int]:
        """(messages, bytes) over every key."""
        counts = list(self.counts.values())
        return sum(c[0] for c in counts), sum(c[1] for c in counts)
