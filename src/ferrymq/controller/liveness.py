"""Which brokers are alive: their BROKER_HEARTBEATs and their connections, on a clock we can fake.

Kept in memory on every controller (brokers heartbeat to all of them), not in the Raft log: a new
leader therefore knows the brokers at once. A broker the table has not heard from yet (a leader
that just started) gets one heartbeat timeout of grace before it counts as gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ferrymq.controller.elect import Standing

BrokerKey = tuple[str, int]
"""(broker name, broker id)."""


@dataclass(slots=True)
class LiveBroker:
    address: str
    timeout: float  # seconds without a heartbeat before the broker counts as gone
    last_seen: float
    standing: Standing
    confirm_offset: int = 0
    connection: object | None = None


class LivenessTable:
    def __init__(self, default_timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.default_timeout = default_timeout
        self.clock = clock
        self._brokers: dict[BrokerKey, LiveBroker] = {}

    def heartbeat(
        self,
        key: BrokerKey,
        address: str,
        *,
        timeout: float | None = None,
        standing: Standing | None = None,
        confirm_offset: int = 0,
        connection: object | None = None,
    ) -> None:
        previous = self._brokers.get(key)
        self._brokers[key] = LiveBroker(
            address,
            timeout if timeout and timeout > 0 else self.default_timeout,
            self.clock(),
            standing or (previous.standing if previous else Standing()),
            confirm_offset,
            connection if connection is not None else (previous.connection if previous else None),
        )

    def grant_grace(self, keys: Iterable[tuple[BrokerKey, str]]) -> None:
        """Count brokers not heard from yet as alive for one more timeout (a new leader's start)."""
        for key, address in keys:
            if key not in self._brokers:
                self._brokers[key] = LiveBroker(address, self.default_timeout, self.clock(), Standing())

    def alive(self, key: BrokerKey) -> bool:
        broker = self._brokers.get(key)
        return broker is not None and self.clock() - broker.last_seen <= broker.timeout

    def get(self, key: BrokerKey) -> LiveBroker | None:
        return self._brokers.get(key)

    def standing(self, key: BrokerKey) -> Standing:
        broker = self._brokers.get(key)
        return broker.standing if broker else Standing()

    def expire(self) -> list[BrokerKey]:
        """Forget the brokers whose heartbeats stopped; return them."""
        now = self.clock()
        gone = [k for k, b in self._brokers.items() if now - b.last_seen > b.timeout]
        for key in gone:
            del self._brokers[key]
        return gone

    def connection_closed(self, connection: object) -> list[BrokerKey]:
        """Forget the brokers that heartbeated over ``connection`` (a killed broker's socket closes)."""
        gone = [k for k, b in self._brokers.items() if b.connection is connection]
        for key in gone:
            del self._brokers[key]
        return gone

    def forget(self, keys: Iterable[BrokerKey]) -> None:
        for key in keys:
            self._brokers.pop(key, None)
