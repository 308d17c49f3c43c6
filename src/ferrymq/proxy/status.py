"""RPC-level statuses: the v2 `Status{code, message}` every answer carries, and the translation of
the message services' RocketMQ response codes into v2 codes (as RocketMQ's proxy translates them), so
clients raise the exception they would raise against RocketMQ."""

from __future__ import annotations

from ferrymq.protocol.codes import ResponseCode
from ferrymq.proxy.v2 import messaging_pb2 as pb

OK = pb.Status(code=pb.OK, message="OK")

_FROM_RESPONSE_CODE: dict[int, int] = {
    ResponseCode.SUCCESS: pb.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_NOT_EXIST: pb.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    ResponseCode.INVALID_PARAMETER: pb.BAD_REQUEST,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: pb.ILLEGAL_FILTER_EXPRESSION,
    ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
    ResponseCode.FLOW_CONTROL: pb.TOO_MANY_REQUESTS,
    ResponseCode.POLLING_FULL: pb.TOO_MANY_REQUESTS,
    ResponseCode.POLLING_TIMEOUT: pb.MESSAGE_NOT_FOUND,
    ResponseCode.PULL_NOT_FOUND: pb.MESSAGE_NOT_FOUND,
    ResponseCode.NO_MESSAGE: pb.MESSAGE_NOT_FOUND,
    ResponseCode.SERVICE_NOT_AVAILABLE: pb.INTERNAL_SERVER_ERROR,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: pb.NOT_IMPLEMENTED,
    ResponseCode.VERSION_NOT_SUPPORTED: pb.VERSION_UNSUPPORTED,
}


def status(code: int, message: str) -> pb.Status:
    return pb.Status(code=code, message=message)  # type: ignore[arg-type]  # an int is a Code


def from_response_code(code: int | None, message: str | None) -> pb.Status:
    """The v2 status for a RocketMQ response code (None: the broker gave no answer)."""
    if code is None:
        return status(pb.INTERNAL_SERVER_ERROR, message or "no answer from the broker")
    v2 = _FROM_RESPONSE_CODE.get(code, pb.INTERNAL_SERVER_ERROR)
    return status(v2, "OK" if v2 == pb.OK else (message or f"refused with response code {code}"))
