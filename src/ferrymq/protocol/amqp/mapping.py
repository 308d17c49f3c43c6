"""How an AMQP message travels as a RocketMQ message: the wire-form basic properties in AMQP_PROPS
(base64) for a byte-exact round trip, the exchange and routing key beside them; a message from a
RocketMQ client comes out with its tag as routing key and empty properties."""

from __future__ import annotations

import base64

from ferrymq.protocol.properties import encode_properties


def to_rocketmq(exchange: str, routing_key: str, properties: bytes) -> str:
    return encode_properties(
        {
            "AMQP_PROPS": base64.b64encode(properties).decode(),
            "AMQP_EXCHANGE": exchange,
            "AMQP_ROUTING_KEY": routing_key,
        }
    )


def from_rocketmq(properties: dict[str, str]) -> tuple[str, str, bytes]:
    """(exchange, routing key, wire-form basic properties) of a stored message."""
    raw = properties.get("AMQP_PROPS")
    return (
        properties.get("AMQP_EXCHANGE", ""),
        properties.get("AMQP_ROUTING_KEY", properties.get("TAGS", "")),
        base64.b64decode(raw) if raw else b"\x00\x00",
    )
