"""Talking to a controller group: find the leader and follow it when it changes.

Used by the brokers' replicas manager and by the admin tools. A request goes to the leader last seen;
a CONTROLLER_NOT_LEADER answer or a dead connection sends it on to the next controller (the answer's
remark or GET_METADATA_INFO name the leader when one is known), once around the group at most.
"""

from __future__ import annotations

import asyncio

from ferrymq.net.client import RemotingClient
from ferrymq.net.errors import RemotingError
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.controller import GetMetaDataResponseHeader
from ferrymq.protocol.remoting import RemotingCommand


class NoControllerLeader(RemotingError):
    """No controller of the group answered as the leader."""


def parse_controller_addrs(text: str) -> list[str]:
    """``"h1:p;h2:p"`` (RocketMQ's controllerAddr) → the addresses."""
    return [a.strip() for a in text.replace(",", ";").split(";") if a.strip()]


class ControllerClient:
    def __init__(self, addresses: list[str], remoting: RemotingClient, timeout: float = 3.0) -> None:
        if not addresses:
            raise ValueError("no controller addresses given")
        self.addresses = list(addresses)
        self.remoting = remoting
        self.timeout = timeout
        self.leader: str | None = None

    async def invoke(
        self, code: int, ext: dict[str, str] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        """The leader's answer to one request (whatever its code, except CONTROLLER_NOT_LEADER)."""
        tried: list[str] = []
        errors: list[str] = []
        candidates = ([self.leader] if self.leader else []) + self.addresses
        for address in candidates:
            if address in tried:
                continue
            tried.append(address)
            request = RemotingCommand(code, ext_fields=dict(ext or {}), body=body)
            try:
                response = await self.remoting.invoke(address, request, self.timeout)
            except RemotingError as exc:
                errors.append(f"{address}: {exc}")
                continue
            if response.code != ResponseCode.CONTROLLER_NOT_LEADER:
                self.leader = address
                return response
            errors.append(f"{address}: {response.remark}")
            hint = await self._leader_of(address)
            if hint and hint not in tried:
                candidates.insert(candidates.index(address) + 1, hint)
        self.leader = None
        raise NoControllerLeader("no controller leader answered: " + "; ".join(errors))

    async def invoke_all(self, code: int, ext: dict[str, str], body: bytes = b"") -> set[str]:
        """Send to every controller at once (heartbeats); the addresses that answered SUCCESS.

        The leader last seen is one of them under the address it was found by: a leader named by a
        follower's hint comes by the address it listens on (an IP in Kubernetes) while the
        configured ones may be DNS names, and whoever asks whether the leader took the heartbeat
        (a master renewing its lease) asks by `self.leader`."""

        async def one(address: str) -> bool:
            request = RemotingCommand(code, ext_fields=dict(ext), body=body)
            try:
                response = await self.remoting.invoke(address, request, self.timeout)
            except RemotingError:
                return False
            return response.code == ResponseCode.SUCCESS

        hinted = self.leader is not None and self.leader not in self.addresses
        targets = [*self.addresses, *([self.leader] if hinted and self.leader else [])]
        answered = await asyncio.gather(*(one(a) for a in targets))
        return {address for address, ok in zip(targets, answered, strict=True) if ok}

    async def metadata(self, address: str) -> GetMetaDataResponseHeader:
        response = await self.remoting.invoke(
            address, RemotingCommand(RequestCode.CONTROLLER_GET_METADATA_INFO), self.timeout
        )
        return GetMetaDataResponseHeader.from_ext_fields(response.ext_fields)

    async def _leader_of(self, address: str) -> str | None:
        try:
            return (await self.metadata(address)).controller_leader_address
        except RemotingError:
            return None
