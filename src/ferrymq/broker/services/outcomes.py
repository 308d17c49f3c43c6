"""What the messaging services answer: a RocketMQ response code and a few fields, nothing of a wire.

The code is RocketMQ's ``ResponseCode`` (SUCCESS, NO_PERMISSION, TOPIC_NOT_EXIST, PULL_NOT_FOUND, ...):
its clients and proxy already speak that vocabulary, the remoting adapter passes it on as is, and
other fronts map it to theirs. ``__slots__`` classes, not dataclasses: one is made per request on the
hot path.
"""

from __future__ import annotations

from ferrymq.protocol.codes import ResponseCode

# Stored, but not as durable as asked: the producer still gets the message ids (RocketMQ's "sendOK").
STORED_CODES = frozenset(
    (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT,
     ResponseCode.SLAVE_NOT_AVAILABLE)
)  # fmt: skip


class SendOutcome:
    """A put: `code` in STORED_CODES means stored, with its ids and place; else `remark` says why not.

    `msg_id` is the offset message id (comma-separated, one per message, for a batch);
    `transaction_id` the message's UNIQ_KEY (the producer's message id; a transaction's id), if any;
    `recall_handle` what cancels a timed message before it is due (protocol.recall), if it is one."""

    __slots__ = (
        "broker_name", "code", "msg_id", "queue_id", "queue_offset", "recall_handle", "remark",
        "transaction_id",
    )  # fmt: skip

    def __init__(
        self,
        code: int,
        remark: str | None,
        broker_name: str = "",
        queue_id: int = -1,
        queue_offset: int = -1,
        msg_id: str = "",
        transaction_id: str | None = None,
        recall_handle: str | None = None,
    ) -> None:
        self.code = code
        self.remark = remark
        self.broker_name = broker_name
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.msg_id = msg_id
        self.transaction_id = transaction_id
        self.recall_handle = recall_handle

    @property
    def stored(self) -> bool:
        return self.code in STORED_CODES

    def __repr__(self) -> str:
        return (
            f"SendOutcome({_name(self.code)}, {self.remark!r}, {self.broker_name}/{self.queue_id}"
            f"@{self.queue_offset}, {self.msg_id})"
        )


class ReadOutcome:
    """A read of one queue: SUCCESS with `buffers` (stored records, the wire layout, unparsed), or
    PULL_NOT_FOUND / PULL_RETRY_IMMEDIATELY / PULL_OFFSET_MOVED with where to go on from, or an error
    code with `remark`. `suggest_broker_id` is where the consumer should read this queue next
    (RocketMQ's suggestWhichBrokerId: 0 is the master)."""

    __slots__ = (
        "buffers",
        "code",
        "max_offset",
        "min_offset",
        "next_begin_offset",
        "remark",
        "suggest_broker_id",
    )

    def __init__(
        self,
        code: int,
        remark: str | None,
        next_begin_offset: int = -1,
        min_offset: int = -1,
        max_offset: int = -1,
        suggest_broker_id: int = 0,
        buffers: list = (),  # type: ignore[assignment]  # an empty tuple: shared, never mutated
    ) -> None:
        self.code = code
        self.remark = remark
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.suggest_broker_id = suggest_broker_id
        self.buffers = buffers

    def body(self) -> bytes:
        """The records as one bytes object (the remoting answer's body)."""
        return b"".join(self.buffers)

    def __repr__(self) -> str:
        return (
            f"ReadOutcome({_name(self.code)}, {self.remark!r}, next={self.next_begin_offset}, "
            f"min={self.min_offset}, max={self.max_offset}, {len(self.buffers)} buffers)"
        )


class PopOutcome:
    """A pop: SUCCESS with `body` (stored records, each stamped with its receipt handle in the POP_CK
    property), POLLING_TIMEOUT when none came within the poll time, or an error code with `remark`."""

    __slots__ = ("body", "code", "remark")

    def __init__(self, code: int, remark: str | None, body: bytes | memoryview = b"") -> None:
        self.code = code
        self.remark = remark
        self.body = body

    def __repr__(self) -> str:
        return f"PopOutcome({_name(self.code)}, {self.remark!r}, {len(self.body)} bytes)"


def _name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)
