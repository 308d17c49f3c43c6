"""A front's copy of the cluster's users and rules, for a gRPC proxy or AMQP gateway that runs apart
from the brokers and checks its clients itself.

The copy is an AuthRegistry kept in step by AUTH_SNAPSHOT to the NameServers (which hold the same
users and rules as the brokers): asked every ``interval`` seconds, answered with the version alone
while nothing changed. Reading secrets takes a super user, so the front signs as one. When no
NameServer answers, the last copy stays in use.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

from ferrymq.auth.model import AuthModelError
from ferrymq.auth.registry import AuthRegistry
from ferrymq.net.errors import RemotingError
from ferrymq.net.tasks import BackgroundTasks
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.remoting import RemotingCommand

log = logging.getLogger(__name__)

REFRESH_S = 2.0  # how soon a change of users or rules reaches a front
Invoke = Callable[[str, RemotingCommand], Awaitable[RemotingCommand]]


class MirrorError(Exception):
    """No NameServer gave the users and rules; the message says why."""


class AuthMirror:
    def __init__(self, invoke: Invoke, namesrvs: list[str], *, interval: float = REFRESH_S) -> None:
        """``invoke``: send a signed request to an address (a ClientInstance's, signing as a super user)."""
        self.registry = AuthRegistry()
        self._invoke = invoke
        self._namesrvs = namesrvs
        self.interval = interval
        self._held: tuple[str, str] = ("", "")  # (epoch, version) of the copy
        self._tasks = BackgroundTasks("auth mirror")
        self._failing = False

    async def start(self) -> AuthMirror:
        """Take a first copy, then keep it in step. Without one (credentials not a super user's, no
        NameServer up) every client is refused until a copy arrives."""
        try:
            await self.refresh()
        except MirrorError as e:
            log.warning("%s; no user of the cluster gets in until they are", e)
            self._failing = True
        self._tasks.spawn(self._follow(), "follow users and rules")
        return self

    async def close(self) -> None:
        await self._tasks.close()

    async def refresh(self) -> bool:
        """Ask the NameServers in turn; True when the copy changed."""
        reasons = []
        for addr in self._namesrvs:
            epoch, version = self._held
            request = RemotingCommand(
                RequestCode.AUTH_SNAPSHOT, ext_fields={"epoch": epoch, "version": version}
            )
            try:
                answer = await self._invoke(addr, request)
            except RemotingError as e:
                reasons.append(f"{addr}: {e}")
                continue
            if answer.code != ResponseCode.SUCCESS:
                reasons.append(f"{addr}: {answer.remark or answer.code}")
                continue
            held = (answer.ext_fields.get("epoch", ""), answer.ext_fields.get("version", ""))
            if not answer.body:
                self._held = held
                return False
            try:
                self.registry.restore(json.loads(bytes(answer.body)))
            except (ValueError, AuthModelError) as e:
                reasons.append(f"{addr}: users and rules do not parse: {e}")
                continue
            self._held = held
            return True
        raise MirrorError("cannot read the cluster's users and rules: " + "; ".join(reasons))

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                if await self.refresh() or self._failing:
                    log.info("users and rules now at version %s of the cluster", self._held[1])
                self._failing = False
            except MirrorError as e:
                if not self._failing:
                    log.warning("%s; the last copy stays in use", e)
                self._failing = True
