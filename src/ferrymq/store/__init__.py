"""The storage engine: CommitLog, ConsumeQueue, IndexFile, flush, recovery and retention.

Synchronous file I/O only, no sockets; imports only ferrymq.protocol.
"""

from ferrymq.store.config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
from ferrymq.store.errors import DiskFullError, StoreError
from ferrymq.store.message_store import MessageStore
from ferrymq.store.status import GetResult, GetStatus, PutResult, PutStatus

__all__ = [
    "ASYNC_FLUSH",
    "SYNC_FLUSH",
    "DiskFullError",
    "GetResult",
    "GetStatus",
    "MessageStore",
    "PutResult",
    "PutStatus",
    "StoreConfig",
    "StoreError",
]
