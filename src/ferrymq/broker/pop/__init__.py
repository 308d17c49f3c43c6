"""RocketMQ 5 pop consumption: invisible time, receipt handles, acks, revive, FIFO groups."""

from ferrymq.broker.pop.service import PopError, PopResult, PopService

__all__ = ["PopError", "PopResult", "PopService"]
