"""SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE: the remoting face of the put service."""

from __future__ import annotations

from ferrymq._native import load
from ferrymq.broker.services.outcomes import STORED_CODES
from ferrymq.broker.services.put import PutService
from ferrymq.net.connection import Connection
from ferrymq.protocol.acl_signing import ACCESS_KEY
from ferrymq.protocol.codes import RequestCode, ResponseCode, SerializeType
from ferrymq.protocol.headers import SendMessageRequestHeader
from ferrymq.protocol.record import pack_host
from ferrymq.protocol.remoting import (
    ANSWER_HEAD,
    EncodedAnswer,
    RemotingCommand,
    ext_str,
    py_encode_parts,
)

_BATCH = int(RequestCode.SEND_BATCH_MESSAGE)
_SUCCESS = int(ResponseCode.SUCCESS)

SendFields = tuple[str, int, "str | None", int, int, int, int, "int | None", bool, str, int]
"""What a send's header says: topic, queue id, properties, flag, sys flag, born timestamp, reconsume
times, max reconsume times, batch, default topic, default topic's queue count."""


def send_fields(ext: dict[str, str]) -> SendFields:
    """The fields of a send header (either key set), the reference for the C reader of the plain
    SEND_MESSAGE_V2 form. Raises RemotingProtocolError naming a missing or bad field."""
    h = SendMessageRequestHeader.from_ext_fields(ext)
    return (
        h.topic, h.queue_id, h.properties, h.flag, h.sys_flag, h.born_timestamp, h.reconsume_times,
        h.max_reconsume_times, h.batch, h.default_topic, h.default_topic_queue_nums,
    )  # fmt: skip


def answer_fields(
    msg_id: str, queue_id: int, queue_offset: int, transaction_id: str | None, region: str, trace_on: str
) -> dict[str, str]:
    """The extFields of a send's answer (RocketMQ's SendMessageResponseHeader and the region's)."""
    ext = {"msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(queue_offset), "MSG_REGION": region,
           "TRACE_ON": trace_on}  # fmt: skip
    if transaction_id:
        ext["transactionId"] = transaction_id
    return ext


def py_send_answer(
    opaque: int, msg_id: str, queue_id: int, queue_offset: int, transaction_id: str | None, region: str,
    trace_on: str,
) -> bytes:  # fmt: skip
    """The length fields and JSON header of a send's SUCCESS answer (no body): the reference for the
    C send_answer, which gives None where a text needs JSON escapes (and leaves it to the reference)."""
    fields = answer_fields(msg_id, queue_id, queue_offset, transaction_id, region, trace_on)
    return py_encode_parts(RemotingCommand(_SUCCESS, opaque=opaque).make_response(_SUCCESS, None, fields))[0]


_native = load("put")
_plain_fields = None if _native is None else _native.send_header  # None: not the plain V2 form
if _native is not None:
    _native.bind_answer(ANSWER_HEAD)
_send_answer = py_send_answer if _native is None else _native.send_answer
_JSON = SerializeType.JSON


class SendProcessor:
    def __init__(self, puts: PutService, region_id: str, trace_on: bool) -> None:
        self.puts = puts
        self._region_id = region_id
        self._trace_on = ext_str(trace_on)
        self._born_hosts: dict[str, bytes] = {}

    def register(self, server) -> None:
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            server.register(code, self.send, eager=True)

    def _born_host(self, conn: Connection) -> bytes | None:
        """The producer's address as the record's BORNHOST (cached per peer address; None: unknown)."""
        packed = self._born_hosts.get(conn.remote_address)
        if packed is None:
            ip, _, port = conn.remote_address.rpartition(":")
            try:
                packed = pack_host(ip.strip("[]"), int(port))
            except ValueError:
                return None
            if len(self._born_hosts) > 10_000:
                self._born_hosts.clear()
            self._born_hosts[conn.remote_address] = packed
        return packed

    async def send(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | EncodedAnswer:
        ext = request.ext_fields
        fields = None if _plain_fields is None else _plain_fields(ext)
        topic, queue_id, props, flag, sys_flag, born, reconsume, max_reconsume, batch, default, nums = (
            send_fields(ext) if fields is None else fields
        )
        born_host = self._born_hosts.get(conn.remote_address) or self._born_host(conn)
        outcome = await self.puts.put(
            topic, queue_id, request.body, props.encode() if props else b"", flag, sys_flag, born, born_host,
            reconsume, max_reconsume, request.code == _BATCH or batch, default, nums, ext.get(ACCESS_KEY),
        )  # fmt: skip
        code = outcome.code
        if code == _SUCCESS and outcome.recall_handle is None and request.serialize_type is _JSON:
            frame = _send_answer(request.opaque, outcome.msg_id, outcome.queue_id, outcome.queue_offset,
                                 outcome.transaction_id, self._region_id, self._trace_on)  # fmt: skip
            if frame is not None:
                return EncodedAnswer(_SUCCESS, request.opaque, frame)
        if code not in STORED_CODES:
            return request.make_response(code, outcome.remark)
        ext = answer_fields(outcome.msg_id, outcome.queue_id, outcome.queue_offset, outcome.transaction_id,
                            self._region_id, self._trace_on)  # fmt: skip
        if outcome.recall_handle:
            ext["recallHandle"] = outcome.recall_handle
        return request.make_response(code, outcome.remark, ext)
