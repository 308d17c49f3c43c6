"""ferrymq: a distributed message broker in Python, wire-compatible with Apache RocketMQ."""

__version__ = "0.1.0"
