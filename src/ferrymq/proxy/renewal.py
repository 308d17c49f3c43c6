"""Auto-renewal of the messages push consumers receive (`auto_renew`): the proxy keeps each one
invisible while the consumer works on it, as RocketMQ's proxy does, by changing its invisible time
shortly before it ends. The client keeps the handle it was given; the proxy maps it to the message's
current handle for the client's ack, nack or forward to the DLQ, so those work after any number of
renewals (RocketMQ's proxy once failed acks after a renewal). After `max_ms` of consumption, or
when its client goes away, a message is let go: it comes back as a retry.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ferrymq.messaging.api import MessageService, MessagingError

log = logging.getLogger(__name__)

INVISIBLE_MS = 60_000  # RocketMQ proxy's defaultInvisibleTimeMills
AHEAD_MS = 10_000  # renewAheadTimeMillis: renew what becomes visible within this
INTERVAL_S = 5.0  # how often due messages are looked for
MAX_MS = 3 * 3600 * 1000  # renewMaxTimeMillis: no consumer holds a message longer


class _Held:
    __slots__ = ("client_id", "current", "group", "renewing", "since_ms", "topic", "visible_at_ms")

    def __init__(
        self, client_id: str, group: str, topic: str, handle: str, now_ms: int, invisible_ms: int
    ) -> None:
        self.client_id = client_id
        self.group = group
        self.topic = topic
        self.current = handle
        self.since_ms = now_ms
        self.visible_at_ms = now_ms + invisible_ms
        self.renewing: asyncio.Future[None] | None = None


def _now_ms() -> int:
    return int(time.time() * 1000)


class Renewals:
    def __init__(
        self, service: MessageService, *, invisible_ms: int = INVISIBLE_MS, ahead_ms: int = AHEAD_MS,
        interval_s: float = INTERVAL_S, max_ms: int = MAX_MS,
    ) -> None:  # fmt: skip
        self.service = service
        self.invisible_ms = invisible_ms
        self.ahead_ms = ahead_ms
        self.interval_s = interval_s
        self.max_ms = max_ms
        self._held: dict[str, _Held] = {}  # by the handle the client holds

    def __len__(self) -> int:
        return len(self._held)

    def track(self, client_id: str, group: str, topic: str, handle: str) -> None:
        """A message just handed out with `handle` to `client_id` for an auto-renew receive."""
        self._held[handle] = _Held(client_id, group, topic, handle, _now_ms(), self.invisible_ms)

    def forget_client(self, client_id: str) -> None:
        """The client is gone (terminated, or its Telemetry stream ended): its messages are renewed
        no more, so they come back within one invisible time."""
        self._held = {h: held for h, held in self._held.items() if held.client_id != client_id}

    async def settle(self, handle: str) -> str:
        """The current handle of the message the client holds as `handle` (itself if not renewed
        here), which stops being renewed: the client is settling it (ack, nack, forward)."""
        held = self._held.pop(handle, None)
        if held is None:
            return handle
        if held.renewing is not None:  # let a renewal under way finish, or its handle is lost
            await asyncio.shield(held.renewing)
        return held.current

    async def run(self) -> None:
        """Renew due messages every `interval_s`, until cancelled."""
        while True:
            await asyncio.sleep(self.interval_s)
            await self.renew_due()

    async def renew_due(self) -> None:
        now = _now_ms()
        for handle, held in list(self._held.items()):
            if held.visible_at_ms - now > self.ahead_ms:
                continue
            if now - held.since_ms >= self.max_ms:
                del self._held[handle]  # consumed too long: let it come back as a retry
                continue
            await self._renew(handle, held)

    async def _renew(self, handle: str, held: _Held) -> None:
        held.renewing = asyncio.get_running_loop().create_future()
        try:
            held.current = await self.service.change_invisible_time(
                held.group, held.topic, held.current, self.invisible_ms
            )
            held.visible_at_ms = _now_ms() + self.invisible_ms
        except MessagingError as e:  # settled elsewhere, or already back: nothing left to keep
            log.info("renewal of a message of %s for %s stopped: %s", held.topic, held.group, e)
            self._held.pop(handle, None)
        finally:
            held.renewing.set_result(None)
            held.renewing = None
