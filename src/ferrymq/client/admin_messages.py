"""Admin look-ups of stored messages: by message id and by key within a time range."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from ferrymq.client.instance import ClientError, ClientInstance
from ferrymq.client.message import MessageExt
from ferrymq.net import RemotingError
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.message_ext import decode_records, decompress_body
from ferrymq.protocol.message_id import parse_offset_msg_id
from ferrymq.protocol.remoting import RemotingCommand


class MessageLookups:
    """Mixed into Admin (which provides `instance` and `_masters`)."""

    instance: ClientInstance
    _masters: Callable[[str | None], Awaitable[dict[str, str]]]

    async def query_by_key(
        self, topic: str, key: str, *, begin: int = 0, end: int | None = None, max_num: int = 64
    ) -> list[MessageExt]:
        """Messages of `topic` with `key` among their KEYS (or as their unique id), stored between
        `begin` and `end` (ms since the epoch; default: all time), oldest first, from every master."""
        ext = {"topic": topic, "key": key, "maxNum": str(max_num), "beginTimestamp": str(begin),
               "endTimestamp": str(end if end is not None else int(time.time() * 1000) + 60_000)}  # fmt: skip
        found: list[MessageExt] = []
        for name, addr in sorted((await self._masters(None)).items()):
            response = await self._ask(addr, RemotingCommand(RequestCode.QUERY_MESSAGE, ext_fields=ext), name)
            if response.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            if response.code != ResponseCode.SUCCESS:
                raise ClientError(f"broker {name} refused the query: {response.remark}")
            found += _decoded(response.body)
        return sorted(found, key=lambda m: (m.store_timestamp, m.commitlog_offset))[:max_num]

    async def view_message(self, msg_id: str, *, topic: str | None = None) -> MessageExt:
        """The message with this id: a unique id (UNIQ_KEY, what send results show; needs `topic`)
        or an offset id (the broker's address and CommitLog offset, what the broker returns)."""
        if topic:
            found = [m for m in await self.query_by_key(topic, msg_id, max_num=8) if m.msg_id == msg_id]
            if found:
                return found[0]
        try:
            host, port, offset = parse_offset_msg_id(msg_id)
        except (ProtocolError, ValueError):
            raise ClientError(
                f"no message {msg_id}" + (f" in {topic}" if topic else " (give its topic)")
            ) from None
        addr = f"{host}:{port}"
        request = RemotingCommand(RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": str(offset)})
        response = await self._ask(addr, request, addr)
        messages = _decoded(response.body) if response.code == ResponseCode.SUCCESS else []
        if not messages or messages[0].offset_msg_id != msg_id.upper():
            raise ClientError(f"no message {msg_id}" + (f" in {topic}" if topic else "") + f" on {addr}")
        return messages[0]

    async def _ask(self, addr: str, request: RemotingCommand, name: str) -> RemotingCommand:
        try:
            return await self.instance.invoke(addr, request)
        except RemotingError as e:
            raise ClientError(f"broker {name} ({addr}) did not answer: {e}") from e


def _decoded(body: bytes | memoryview) -> list[MessageExt]:
    """The messages of an answer, bodies decompressed; CompressedBodyError names one that does not."""
    return [decompress_body(m) for m in decode_records(body)]
