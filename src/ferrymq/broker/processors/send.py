"""SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE: the remoting face of the put service."""

from __future__ import annotations

from ferrymq.broker.services.outcomes import STORED_CODES
from ferrymq.broker.services.put import PutService
from ferrymq.net.connection import Connection
from ferrymq.protocol.acl_signing import ACCESS_KEY
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import SendMessageRequestHeader
from ferrymq.protocol.record import pack_host
from ferrymq.protocol.remoting import RemotingCommand, ext_str

_BATCH = int(RequestCode.SEND_BATCH_MESSAGE)
_SUCCESS = int(ResponseCode.SUCCESS)


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

    async def send(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = SendMessageRequestHeader.from_ext_fields(request.ext_fields)
        outcome = await self.puts.put(
            h.topic, h.queue_id, request.body, (h.properties or "").encode(), h.flag, h.sys_flag,
            h.born_timestamp, self._born_host(conn), h.reconsume_times, h.max_reconsume_times,
            request.code == _BATCH or h.batch, h.default_topic, h.default_topic_queue_nums,
            request.ext_fields.get(ACCESS_KEY),
        )  # fmt: skip
        code = outcome.code
        if code not in STORED_CODES:
            return request.make_response(code, outcome.remark)
        ext = {
            "msgId": outcome.msg_id,
            "queueId": ext_str(outcome.queue_id),
            "queueOffset": ext_str(outcome.queue_offset),
            "MSG_REGION": self._region_id,
            "TRACE_ON": self._trace_on,
        }
        if outcome.transaction_id:
            ext["transactionId"] = outcome.transaction_id
        if outcome.recall_handle:
            ext["recallHandle"] = outcome.recall_handle
        return request.make_response(code, outcome.remark, ext)
