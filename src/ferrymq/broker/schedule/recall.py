"""Recalling a timed message before it is due (RocketMQ 5.3's RecallMessageProcessor): the handle
its send answered says where and when; a delete marker due in the same timer slot makes the timer
drop both (timer.py). Recalling a message already delivered, or one never sent, is not an error the
broker can see: only a time already past is refused."""

from __future__ import annotations

import time

from ferrymq.broker.services.put import PutService
from ferrymq.protocol.codes import ResponseCode
from ferrymq.protocol.properties import Prop, encode_properties
from ferrymq.protocol.recall import DELETE_KEY, RECALL_TAG, RecallHandle, delete_key


class RecallError(Exception):
    """A recall the broker refuses; `code` is RocketMQ's response code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class RecallService:
    def __init__(self, puts: PutService) -> None:
        self.puts = puts

    async def recall(self, topic: str, handle_text: str, producer_group: str = "") -> str:
        """Cancel the message `handle_text` names; returns its message id (UNIQ_KEY)."""
        config = self.puts.config
        if self.puts.topics.get(topic) is None:
            raise RecallError(ResponseCode.TOPIC_NOT_EXIST, f"recall failed, topic {topic} does not exist")
        try:
            handle = RecallHandle.decode(handle_text)
        except ValueError as e:
            raise RecallError(ResponseCode.ILLEGAL_OPERATION, str(e)) from None
        if handle.topic != topic:
            raise RecallError(
                ResponseCode.ILLEGAL_OPERATION, f"recall failed, the handle is of topic {handle.topic}"
            )
        if handle.broker_name != config.broker_name:
            raise RecallError(
                ResponseCode.ILLEGAL_OPERATION, f"recall failed, the handle is of broker {handle.broker_name}"
            )
        left_ms = handle.deliver_ms - int(time.time() * 1000)
        if not 0 < left_ms < config.store.timer_max_delay_sec * 1000:
            raise RecallError(ResponseCode.ILLEGAL_OPERATION, "recall failed, the message is due already")
        props = {
            Prop.TAGS: RECALL_TAG, DELETE_KEY: delete_key(topic, handle.message_id),
            Prop.UNIQ_KEY: handle.message_id, Prop.TIMER_DELIVER_MS: str(handle.deliver_ms),
        }  # fmt: skip
        if producer_group:
            props[Prop.PGROUP] = producer_group
        outcome = await self.puts.put(
            topic, 0, b"0", encode_properties(props).encode(), 0, 0, int(time.time() * 1000)
        )
        if not outcome.stored:
            raise RecallError(outcome.code, f"recall failed: {outcome.remark}")
        return handle.message_id
