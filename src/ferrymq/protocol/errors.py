"""The one error family every ferrymq decoder raises, so callers catch bad input in one place."""


class ProtocolError(ValueError):
    """Input that does not follow a RocketMQ (or AMQP) wire or storage format."""


class MessageDecodeError(ProtocolError):
    """Bytes that are not a valid message record, batch body or message id."""
