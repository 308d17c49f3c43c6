"""END_TRANSACTION: a producer commits or rolls back a half message (usually oneway)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from ferrymq.broker.escape import EscapeBridge
from ferrymq.broker.processors.common import error, ok
from ferrymq.broker.transactions import EndError, TransactionService
from ferrymq.net.connection import Connection
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import EndTransactionRequestHeader
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.protocol.sys_flag import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_ROLLBACK_TYPE

log = logging.getLogger(__name__)


class MasterRole(Protocol):
    @property
    def is_master(self) -> bool: ...


class EndTransactionProcessor:
    def __init__(
        self, transactions: TransactionService, role: MasterRole,
        acting_bridge: Callable[[], EscapeBridge | None] = lambda: None,
    ) -> None:  # fmt: skip
        """`acting_bridge()`: the escape bridge while this slave acts for its missing master, else None."""
        self.transactions = transactions
        self.role = role
        self.acting_bridge = acting_bridge

    def register(self, server) -> None:
        # Producers send it oneway and it rarely waits (a commit's intent on a master whose slave may act
        # for it does): started at once, after the answers read with it, a task only if it waits.
        server.register(RequestCode.END_TRANSACTION, self.end_transaction, eager=True, late=True)

    async def end_transaction(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        header = EndTransactionRequestHeader.from_ext_fields(request.ext_fields)
        bridge = None if self.role.is_master else self.acting_bridge()
        if not self.role.is_master and bridge is None:
            return error(request, ResponseCode.SLAVE_NOT_AVAILABLE, "a slave cannot end transactions")
        state = header.commit_or_rollback
        if state == TRANSACTION_NOT_TYPE:  # the producer does not know yet: the check-back will ask
            return ok(request)
        if state not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return error(request, ResponseCode.SYSTEM_ERROR, f"commitOrRollback {state} is not 0, 8 or 12")
        try:
            if bridge is None:
                outcome = await self.transactions.end(
                    header.producer_group, header.commit_log_offset, header.tran_state_table_offset, state
                )
            else:  # in a task: the escape waits on another broker (this handler starts outside one)
                outcome = await asyncio.ensure_future(self.transactions.end_escaped(
                    bridge.put, header.producer_group, header.commit_log_offset,
                    header.tran_state_table_offset, state,
                ))  # fmt: skip
        except EndError as e:
            log.warning("END_TRANSACTION of %s from %s refused: %s", header.msg_id, conn.remote_address, e)
            return error(request, ResponseCode.SYSTEM_ERROR, str(e))
        if request.is_oneway:  # as producers send it: nobody reads an answer
            return None
        return request.make_response(ResponseCode.SUCCESS, outcome)
