"""TransactionProducer: a send that becomes visible only when the local transaction commits.

RocketMQ's two-phase flow: the message is sent as a half message (TRAN_MSG=true, PGROUP), the
local transaction runs, and its outcome goes to the broker as a oneway END_TRANSACTION (commit,
rollback, or unknown). For outcomes the broker never heard, it asks the producer group later
(CHECK_TRANSACTION_STATE, over this client's own connection) and the `checker` answers.

Callbacks may be async functions or plain ones. The local-transaction callback runs in the
caller's task (a plain function runs on the event loop: keep it short, or make it async); the
checker is called whenever a broker asks, so a plain checker runs in a worker thread and may block.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from ferrymq.client.hooks import EndTransactionHook, call_hook, hooked_send
from ferrymq.client.instance import ClientInstance
from ferrymq.client.message import Message, SendResult, SendStatus
from ferrymq.client.producer import Producer, SendError
from ferrymq.net import Connection, RemotingError
from ferrymq.protocol.codes import RequestCode
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from ferrymq.protocol.message_ext import MessageExt, decode_record, decompress_body
from ferrymq.protocol.message_id import parse_offset_msg_id
from ferrymq.protocol.properties import Prop
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.protocol.sys_flag import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from ferrymq.protocol.trace import TransactionState

log = logging.getLogger(__name__)

LocalTransactionState = TransactionState  # RocketMQ's name: COMMIT_MESSAGE, ROLLBACK_MESSAGE, UNKNOW
LocalTransaction = Callable[[Message, Any], "TransactionState | Awaitable[TransactionState]"]
Checker = Callable[[MessageExt], "TransactionState | Awaitable[TransactionState]"]

_SYS_FLAG = {
    TransactionState.COMMIT_MESSAGE: TRANSACTION_COMMIT_TYPE,
    TransactionState.ROLLBACK_MESSAGE: TRANSACTION_ROLLBACK_TYPE,
    TransactionState.UNKNOW: TRANSACTION_NOT_TYPE,
}
# instance -> producer group -> producer: one client instance may serve several transaction producers
_checkers: weakref.WeakKeyDictionary[ClientInstance, dict[str, TransactionProducer]] = (
    weakref.WeakKeyDictionary()
)


@dataclasses.dataclass
class TransactionSendResult(SendResult):
    local_transaction_state: TransactionState = TransactionState.UNKNOW


class TransactionProducer(Producer):
    """A Producer that also sends transactional messages; `checker` answers the broker's check-backs."""

    def __init__(self, group: str, namesrv_addr: str, *, checker: Checker | None = None, **options) -> None:
        super().__init__(group, namesrv_addr, **options)
        self.checker = checker
        self._heartbeated: set[str] = set()

    @property
    def end_hooks(self) -> list[EndTransactionHook]:
        return self.hooks.end_transaction

    async def start(self) -> None:
        await super().start()
        producers = _checkers.setdefault(self.instance, {})
        if not producers:
            self.instance.remoting.register(RequestCode.CHECK_TRANSACTION_STATE, _checker_for(self.instance))
        producers[self.group] = self

    async def shutdown(self) -> None:
        _checkers.get(self.instance, {}).pop(self.group, None)
        await super().shutdown()

    async def send_message_in_transaction(
        self, message: Message, local_transaction: LocalTransaction, arg: Any = None
    ) -> TransactionSendResult:
        """Send `message` as a half message, run `local_transaction(message, arg)`, end the transaction.

        The callback returns a TransactionState (None counts as UNKNOW; an exception too, and the
        broker will check back). A send that is not SEND_OK is rolled back without running it.
        """
        if message.delay_level:
            raise SendError("transactional messages cannot be delayed")
        half = dataclasses.replace(
            message, properties={**message.properties, Prop.TRAN_MSG: "true", Prop.PGROUP: self.group}
        )
        result = await hooked_send(self.hooks.send, [half], self._send_half(half))
        state, remark = TransactionState.ROLLBACK_MESSAGE, None
        if result.status is SendStatus.SEND_OK:
            state, remark = await _run(local_transaction, message, arg)
        addr = (await self.instance.route(message.topic)).masters.get(result.message_queue.broker_name)
        if addr is not None:
            await self._end(addr, result, message.topic, state, remark)
            for hook in self.hooks.end_transaction:
                call_hook(hook, message, result.msg_id, addr, result.msg_id, state, False)
        return TransactionSendResult(**vars(result), local_transaction_state=state)

    async def _send_half(self, half: Message) -> SendResult:
        body, props, sys_flag, uniq = self._prepare(half)
        prepared = sys_flag | TRANSACTION_PREPARED_TYPE
        return await self._send(half.topic, body, props, half.flag, prepared, False, None, half, None, uniq)

    async def _end(self, addr: str, result: SendResult, topic: str, state: TransactionState, remark) -> None:
        _, _, commit_log_offset = parse_offset_msg_id(result.offset_msg_id)
        header = EndTransactionRequestHeader(
            producer_group=self.group, tran_state_table_offset=result.queue_offset,
            commit_log_offset=commit_log_offset, commit_or_rollback=_SYS_FLAG[state], msg_id=result.msg_id,
            topic=topic, from_transaction_check=False, transaction_id=result.msg_id,
        )  # fmt: skip
        request = RemotingCommand(
            RequestCode.END_TRANSACTION, ext_fields=header.to_ext_fields(), remark=remark
        )
        try:
            await self.instance.remoting.invoke_oneway(addr, request)
        except RemotingError as e:  # the broker will check back
            log.warning("END_TRANSACTION of %s to %s failed: %s", result.msg_id, addr, e)
        if addr not in self._heartbeated:  # so the broker can check back before the next heartbeat
            self._heartbeated.add(addr)
            await self.instance.heartbeat(addr)

    async def _answer_check(
        self, conn: Connection, header: CheckTransactionStateRequestHeader, msg: MessageExt
    ):
        if self.checker is None:
            log.warning("broker %s checks transaction %s, but producer %s has no checker",
                        conn.remote_address, header.transaction_id, self.group)  # fmt: skip
            return
        state, remark = await _run(self.checker, msg, in_thread=True)
        end = EndTransactionRequestHeader(
            producer_group=self.group, tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset, commit_or_rollback=_SYS_FLAG[state],
            msg_id=header.msg_id or msg.msg_id, topic=msg.topic, from_transaction_check=True,
            transaction_id=header.transaction_id,
        )  # fmt: skip
        request = RemotingCommand(RequestCode.END_TRANSACTION, ext_fields=end.to_ext_fields(), remark=remark)
        try:
            await conn.send_oneway(request)
        except RemotingError as e:
            log.warning("cannot answer the check of %s: %s", header.transaction_id, e)
        for hook in self.hooks.end_transaction:
            call_hook(hook, msg, end.msg_id, conn.remote_address, header.transaction_id or "", state, True)


def _checker_for(instance: ClientInstance):
    async def on_check(conn: Connection, request: RemotingCommand) -> None:
        try:
            header = CheckTransactionStateRequestHeader.from_ext_fields(request.ext_fields)
            msg = decompress_body(decode_record(request.body))
        except ProtocolError as e:
            log.warning("bad CHECK_TRANSACTION_STATE from %s: %s", conn.remote_address, e)
            return
        producer = _checkers.get(instance, {}).get(msg.properties.get(Prop.PGROUP, ""))
        if producer is None:
            log.warning(
                "CHECK_TRANSACTION_STATE for unknown producer group %s", msg.properties.get(Prop.PGROUP)
            )
            return
        await producer._answer_check(conn, header, msg)

    return on_check


async def _run(callback, *args, in_thread: bool = False) -> tuple[TransactionState, str | None]:
    """Call a user callback (async or plain); (its state, a remark when it failed)."""
    try:
        if inspect.iscoroutinefunction(callback):
            state = await callback(*args)
        elif in_thread:
            state = await asyncio.to_thread(callback, *args)
        else:
            state = callback(*args)
            if inspect.isawaitable(state):
                state = await state
    except Exception as e:
        log.exception("transaction callback %s failed", getattr(callback, "__name__", callback))
        return TransactionState.UNKNOW, f"local transaction failed: {type(e).__name__}: {e}"
    if isinstance(state, str) and not isinstance(state, TransactionState):
        state = TransactionState.__members__.get(state, TransactionState.UNKNOW)
    return (state if isinstance(state, TransactionState) else TransactionState.UNKNOW), None
