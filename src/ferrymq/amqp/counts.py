"""What passes through a gateway, counted as plain ints where it happens and read by the metrics
collector at scrape time (RabbitMQ's global message counters)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class MessageCounts:
    received: int = 0  # publishes taken from clients
    confirmed: int = 0  # publisher confirms (basic.ack) sent
    delivered: int = 0  # deliveries and basic.get answers sent to consumers
    acknowledged: int = 0  # deliveries the consumers acknowledged
