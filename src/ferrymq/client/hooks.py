"""The hook points of producers and push consumers (RocketMQ's SendMessageHook / ConsumeMessageHook).

Hooks are plain synchronous calls on the event loop, made after the fact: they must be quick (message
trace only appends a record to a buffer); one that raises is logged and does not fail the call.
An extension (message trace) installs a set of hooks and has a life of its own, started and stopped
with the client: clients know their `Hooks`, never what an extension does with them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from ferrymq.client.message import Message, MessageExt, SendResult
    from ferrymq.protocol.trace import TransactionState

log = logging.getLogger(__name__)
E = TypeVar("E", bound="Extension")


class SendHook(Protocol):
    def __call__(
        self, messages: Sequence[Message], result: SendResult | None, started_ms: int, cost_ms: int
    ) -> None:
        """After a send of one message or a batch: its result (ids comma-joined), or None if it failed."""


class EndTransactionHook(Protocol):
    def __call__(self, message: Message | MessageExt, msg_id: str, broker_addr: str, transaction_id: str,
                 state: TransactionState, from_check: bool) -> None:  # fmt: skip
        """After END_TRANSACTION went to `broker_addr` (from the local transaction or a check-back)."""


class ConsumeHook(Protocol):
    def before(self, group: str, messages: list[MessageExt]) -> Any:
        """Just before the listener runs; the answer is handed back to `after`."""

    def after(self, context: Any, success: bool) -> None:
        """When the listener has finished with the batch."""


class Extension(Protocol):
    def install(self, hooks: Hooks) -> None:
        """Add this extension's hooks to a client's."""

    async def start(self) -> None:
        """When the client starts."""

    async def stop(self) -> None:
        """When the client stops, after its last send or consume."""


class Hooks:
    """The hooks of one producer or consumer, and the extensions that installed some of them."""

    def __init__(self) -> None:
        self.send: list[SendHook] = []
        self.consume: list[ConsumeHook] = []
        self.end_transaction: list[EndTransactionHook] = []
        self.extensions: list[Extension] = []

    def add(self, extension: E) -> E:
        extension.install(self)
        self.extensions.append(extension)
        return extension

    async def start(self) -> None:
        for extension in self.extensions:
            await extension.start()

    async def stop(self) -> None:
        for extension in reversed(self.extensions):
            await extension.stop()


async def hooked_send(
    hooks: list[SendHook], messages: Sequence[Message], send: Awaitable[SendResult]
) -> SendResult:
    """Await `send` and tell every hook how it went (the error still propagates)."""
    started_ns = time.time_ns()
    result = None
    try:
        result = await send
        return result
    finally:
        started_ms = started_ns // 1_000_000
        cost_ms = (time.time_ns() - started_ns) // 1_000_000
        for hook in hooks:
            call_hook(hook, messages, result, started_ms, cost_ms)


async def hooked_consume(
    hooks: list[ConsumeHook], group: str, messages: list, consume: Awaitable[bool]
) -> bool:
    """Await the listener call `consume` between every hook's `before` and `after`."""
    contexts = [call_hook(hook.before, group, messages) for hook in hooks]
    success = False
    try:
        success = await consume
        return success
    finally:
        for hook, context in zip(hooks, contexts, strict=True):
            call_hook(hook.after, context, success)


def call_hook(call, *args) -> Any:
    """A hook's failure is logged, never the send's or the consume's (None stands for its answer)."""
    try:
        return call(*args)
    except Exception:
        log.exception("hook %r failed", call)
        return None
