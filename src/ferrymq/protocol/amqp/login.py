"""SASL responses of connection.start-ok: PLAIN ("authzid NUL user NUL password") and RabbitMQ's
AMQPLAIN (a field table without its length prefix, with LOGIN and PASSWORD)."""

from __future__ import annotations

from ferrymq.protocol.amqp.fields import decode_table

MECHANISMS = ("PLAIN", "AMQPLAIN")


def credentials(mechanism: str, response: str | bytes) -> tuple[str, str] | None:
    """(username, password) from a response, or None when it is malformed."""
    raw = response.encode() if isinstance(response, str) else bytes(response)
    try:
        if mechanism == "PLAIN":
            parts = raw.split(b"\x00")
            if len(parts) != 3:
                return None
            return parts[1].decode(), parts[2].decode()
        if mechanism == "AMQPLAIN":
            _, table = decode_table(len(raw).to_bytes(4, "big") + raw)
            login, password = table.get("LOGIN"), table.get("PASSWORD")
            if not isinstance(login, str | bytes) or not isinstance(password, str | bytes):
                return None
            return _text(login), _text(password)
    except ValueError:
        return None
    return None


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode()
