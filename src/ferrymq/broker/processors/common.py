"""What every processor shares: reply helpers."""

from __future__ import annotations

from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.headers import CustomHeader
from ferrymq.protocol.remoting import RemotingCommand


def ok(
    request: RemotingCommand, header: CustomHeader | None = None, body: bytes | memoryview = b""
) -> RemotingCommand:
    return request.make_response(ResponseCode.SUCCESS, None, header.to_ext_fields() if header else None, body)


def error(request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
    return request.make_response(code, remark)
