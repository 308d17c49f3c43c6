"""The errors a remoting call can end in, apart from an error response (which is a normal answer)."""


class RemotingError(Exception):
    """A remoting call failed in transport: no answer came back."""


class RemotingConnectionError(RemotingError):
    """The connection could not be made, or closed before the answer arrived."""


class RemotingTimeoutError(RemotingError):
    """The peer did not answer within the call's timeout; the connection stays usable."""
