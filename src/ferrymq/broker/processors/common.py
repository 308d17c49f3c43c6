"""What every processor shares: reply helpers and the store-status to response-code mapping."""

from __future__ import annotations

from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.headers import CustomHeader
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.store import PutStatus

PUT_STATUS_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.DISK_FULL: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.CREATE_MAPPED_FILE_FAILED: ResponseCode.SYSTEM_ERROR,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: ResponseCode.SYSTEM_ERROR,
}
# Stored, but not as durable as asked: the producer still gets the message ids (RocketMQ's "sendOK").
STORED_CODES = frozenset(
    (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT,
     ResponseCode.SLAVE_NOT_AVAILABLE)
)  # fmt: skip


def ok(
    request: RemotingCommand, header: CustomHeader | None = None, body: bytes | memoryview = b""
) -> RemotingCommand:
    return request.make_response(ResponseCode.SUCCESS, None, header.to_ext_fields() if header else None, body)


def error(request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
    return request.make_response(code, remark)
