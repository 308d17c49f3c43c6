"""What a connection tells its owner. The owner answers login and vhost requests by calling back
into the connection; everything else it acts on or ignores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ferrymq.protocol.amqp.fast import Publish


@dataclass(frozen=True, slots=True)
class LoginRequested:
    """connection.start-ok arrived: check the credentials, then call accept_login or refuse_login."""

    mechanism: str
    username: str
    password: str
    client_properties: dict


@dataclass(frozen=True, slots=True)
class VhostRequested:
    """connection.open arrived: call open_vhost or refuse_vhost."""

    vhost: str


@dataclass(frozen=True, slots=True)
class SecretUpdated:
    """connection.update-secret arrived: call accept_secret (or close the connection)."""

    secret: str
    reason: str


@dataclass(frozen=True, slots=True)
class ChannelOpened:
    channel: int


@dataclass(frozen=True, slots=True)
class ChannelClosed:
    """The channel is gone (closed by either side; its number may be opened again). When the peer
    closed it, `reply` is the close-ok to send once the answers to the channel's earlier methods are
    sent (they must not be overtaken by it)."""

    channel: int
    reply: bytes = b""


@dataclass(slots=True)  # (the two made per message are not frozen: see fast.py)
class MethodReceived:
    """A method on an open channel that the connection does not handle itself: a pamqp method, or
    one of fast.Ack, fast.Nack, fast.Reject."""

    channel: int
    method: Any


@dataclass(slots=True)
class ContentReceived:
    """A whole basic.publish: method, properties in wire form, body, and on a channel in confirm mode
    its sequence number (the delivery tag of its basic.ack or basic.nack; 0 otherwise)."""

    channel: int
    publish: Publish
    properties: bytes
    body: bytes
    sequence: int = 0


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The connection is over: send what is pending, then close the socket. `code` is the reply code
    of the close (200 for a clean one); `by_peer` tells who began it."""

    code: int
    text: str
    by_peer: bool


Event = (
    LoginRequested
    | VhostRequested
    | SecretUpdated
    | ChannelOpened
    | ChannelClosed
    | MethodReceived
    | ContentReceived
    | ConnectionClosed
)
