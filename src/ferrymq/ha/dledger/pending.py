"""Appends waiting for their commit: what turns a commit index into answers to producers.

An append proposed as (index, term) is acknowledged once the commit index reaches its index and the
entry there has its term. If the committed entry there has another term, a later leader replaced it
and the append failed; the producer may send it again. An entry cut from this node's log is not
failed yet: another node may still hold it and commit it as a leader of a later term.

For a batch, track its last entry: a leader appends a batch at once in one term, so by Raft's log
matching its last entry committed with that term means the whole batch is.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PendingAppends(Generic[T]):
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, T]] = []  # (index, order, term, token)
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, index: int, term: int, token: T) -> None:
        heapq.heappush(self._heap, (index, next(self._order), term, token))

    def settle(self, commit: int, term_at: Callable[[int], int]) -> tuple[list[T], list[T]]:
        """(acknowledged, replaced) tokens among those the commit index now covers."""
        acked: list[T] = []
        replaced: list[T] = []
        heap = self._heap
        while heap and heap[0][0] <= commit:
            index, _, term, token = heapq.heappop(heap)
            (acked if term_at(index) == term else replaced).append(token)
        return acked, replaced

    def drop_all(self) -> list[T]:
        """Give up on every pending append (shutdown, or its wait timed out): outcome unknown."""
        tokens = [t for *_, t in sorted(self._heap)]
        self._heap.clear()
        return tokens
