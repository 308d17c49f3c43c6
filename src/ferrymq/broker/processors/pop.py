"""POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME and NOTIFICATION:
RocketMQ's remoting headers over the transport-neutral PopService."""

from __future__ import annotations

from collections.abc import Callable

from ferrymq.broker.pop import PopError, PopService
from ferrymq.broker.processors.common import error, ok
from ferrymq.broker.topics import PERM_READ
from ferrymq.net.connection import Connection
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.pop import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    NotificationRequestHeader,
    NotificationResponseHeader,
    PopMessageRequestHeader,
    ReceiptHandle,
    decode_batch_ack_body,
    java_bitset_decode,
)
from ferrymq.protocol.remoting import RemotingCommand


class PopProcessor:
    def __init__(self, pop: PopService, broker_permission: Callable[[], int]) -> None:
        """`broker_permission()`: the broker's permission now (an admin may change it while it runs)."""
        self.pop = pop
        self.broker_permission = broker_permission

    def register(self, server) -> None:
        # Like pulls, these mostly answer without waiting: started in the read callback, no task each.
        server.register(RequestCode.POP_MESSAGE, self.pop_message, eager=True)
        server.register(RequestCode.ACK_MESSAGE, self.ack_message, eager=True)
        server.register(RequestCode.BATCH_ACK_MESSAGE, self.batch_ack_message, eager=True)
        server.register(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, self.change_invisible_time, eager=True)
        server.register(RequestCode.NOTIFICATION, self.notification)
        server.register(RequestCode.POP_ROLLBACK, self.export_pop_records)

    async def pop_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = PopMessageRequestHeader.from_ext_fields(request.ext_fields)
        if not self.broker_permission() & PERM_READ:
            return error(request, ResponseCode.NO_PERMISSION, "the broker is not readable")
        try:
            result = await self.pop.pop(
                h.consumer_group,
                h.topic,
                h.queue_id,
                h.max_msg_nums,
                h.invisible_time,
                h.poll_time,
                expression=h.exp,
                expression_type=h.exp_type,
                init_mode=h.init_mode,
                order=bool(h.order),
                client=conn,
            )
        except PopError as e:
            return error(request, e.code, str(e))
        if not result.found:
            return request.make_response(
                ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", result.header_fields()
            )
        return request.make_response(ResponseCode.SUCCESS, "FOUND", result.header_fields(), result.body)

    async def ack_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = AckMessageRequestHeader.from_ext_fields(request.ext_fields)
        try:
            await self.pop.ack(h.consumer_group, h.topic, _with_offset(h.extra_info, h.offset))
        except PopError as e:
            return error(request, e.code, str(e))
        return ok(request)

    async def batch_ack_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Each entry names one checkpoint and a bit set of offsets (start offset + bit index)."""
        try:
            body = decode_batch_ack_body(request.body or b"{}")
        except ProtocolError as e:
            return error(request, ResponseCode.INVALID_PARAMETER, str(e))
        if not body.acks:
            return error(request, ResponseCode.NO_MESSAGE, "no acks in the request")
        if body.broker_name and body.broker_name != self.pop.broker_name:
            return error(
                request,
                ResponseCode.INVALID_PARAMETER,
                f"acks for broker {body.broker_name}, this is {self.pop.broker_name}",
            )
        refused = 0
        for entry in body.acks:
            try:
                refused_bits = await self.pop.ack_bits(
                    entry.consumer_group,
                    entry.topic,
                    entry.retry,
                    entry.queue_id,
                    entry.start_offset,
                    entry.pop_time,
                    java_bitset_decode(entry.bit_set),
                )
                refused += refused_bits.bit_count()
            except ProtocolError as e:
                return error(request, ResponseCode.INVALID_PARAMETER, str(e))
            except PopError as e:
                return error(request, e.code, str(e))
        if refused:
            return error(
                request,
                ResponseCode.NO_MESSAGE,
                f"{refused} acks refused: handles not current (acked, changed or redelivered)",
            )
        return ok(request)

    async def change_invisible_time(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ChangeInvisibleTimeRequestHeader.from_ext_fields(request.ext_fields)
        try:
            new = await self.pop.change_invisible(
                h.consumer_group, h.topic, _with_offset(h.extra_info, h.offset), h.invisible_time
            )
        except PopError as e:
            return error(request, e.code, str(e))
        header = ChangeInvisibleTimeResponseHeader(
            pop_time=new.pop_time, invisible_time=new.invisible_time, revive_qid=new.revive_qid
        )
        return ok(request, header)

    async def export_pop_records(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """POP_ROLLBACK is RocketMQ's admin "exportPopRecord": move pop state from its RocksDB store
        back to the file store. Ours is always in the CommitLog (the revive topic): nothing to do."""
        return request.make_response(ResponseCode.SUCCESS, "pop records are kept in the CommitLog already")

    async def notification(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = NotificationRequestHeader.from_ext_fields(request.ext_fields)
        try:
            has = await self.pop.has_message(
                h.consumer_group, h.topic, h.queue_id, h.poll_time, order=bool(h.order)
            )
        except PopError as e:
            return error(request, e.code, str(e))
        return ok(request, NotificationResponseHeader(has_msg=has))


def _with_offset(extra_info: str, offset: int) -> str | ReceiptHandle:
    """RocketMQ's ack names the message by the header's offset; a 7-field extraInfo gets it added."""
    if extra_info.count(" ") == 6:
        return f"{extra_info} {offset}"
    try:
        handle = ReceiptHandle.decode(extra_info)
    except ProtocolError:
        return extra_info  # the service answers with the reason
    return handle._replace(offset=offset) if handle.offset != offset else handle
