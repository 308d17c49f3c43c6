"""The relay (`ferrymq relay`): moves the messages producers diverted to a standby cluster while the
primary could not take them back into their topics on the primary (see `ferrymq.client.standby`)."""

from ferrymq.relay.relay import Relay

__all__ = ["Relay"]
