"""Queue locks for orderly consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ), with RocketMQ's expiry."""

from __future__ import annotations

import time

from ferrymq.protocol.bodies import MessageQueue


class RebalanceLockManager:
    def __init__(self, max_live_seconds: float = 60.0) -> None:
        self.max_live = max_live_seconds
        self._locks: dict[str, dict[MessageQueue, tuple[str, float]]] = {}  # group -> mq -> (client, time)

    def lock(self, group: str, client_id: str, mqs: list[MessageQueue]) -> list[MessageQueue]:
        """Grant the queues that are free, expired or already this client's; renew those held."""
        now = time.monotonic()
        table = self._locks.setdefault(group, {})
        granted = []
        for mq in mqs:
            holder = table.get(mq)
            if holder is None or holder[0] == client_id or now - holder[1] > self.max_live:
                table[mq] = (client_id, now)
                granted.append(mq)
        return granted

    def unlock(self, group: str, client_id: str, mqs: list[MessageQueue]) -> None:
        table = self._locks.get(group, {})
        for mq in mqs:
            holder = table.get(mq)
            if holder is not None and holder[0] == client_id:
                del table[mq]
