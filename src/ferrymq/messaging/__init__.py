"""The messaging seam protocol fronts stand on (RocketMQ 5 proxy's MessageService): send, read by
queue and offset, consumer offsets and routes, served in-process by a broker (`local`) or over
remoting by a cluster (`remote`). See `api` for the interface."""

from ferrymq.messaging.api import MessageService, MessagingError, ReadOutcome, SendOutcome

__all__ = ["MessageService", "MessagingError", "ReadOutcome", "SendOutcome"]
