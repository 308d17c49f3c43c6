"""The SDK for scripts without asyncio: the same classes and names, every call blocking.

One event loop runs in a daemon thread for the whole process; each object lives on it and each
call waits for its result: `from ferrymq.client.sync import Producer, PushConsumer, SimpleConsumer`.
Push listeners that are plain functions run in worker threads, so they may block.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

from ferrymq.client import message as _message
from ferrymq.client import producer as _producer
from ferrymq.client import pull_consumer as _pull_consumer
from ferrymq.client import push_consumer as _push_consumer
from ferrymq.client import simple_consumer as _simple_consumer
from ferrymq.client import transaction as _transaction

Message = _message.Message
ConsumeResult = _push_consumer.ConsumeResult
LocalTransactionState = _transaction.LocalTransactionState

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="ferrymq-client-loop", daemon=True).start()
        return _loop


class _Blocking:
    """Wraps an asyncio SDK object: coroutine methods become blocking calls, the rest pass through."""

    _cls: type

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        async def make() -> Any:
            return self._cls(*args, **kwargs)

        self._loop = _background_loop()
        self._target = self._call(make())

    def _call(self, coro) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if inspect.iscoroutinefunction(attr):
            return lambda *args, **kwargs: self._call(attr(*args, **kwargs))
        return attr

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


class Producer(_Blocking):
    _cls = _producer.Producer

    def send_async(self, message: Message, callback) -> None:
        """Fire and forget; `callback(result, error)` runs on the client's loop thread."""
        self._loop.call_soon_threadsafe(self._target.send_async, message, callback)


class TransactionProducer(Producer):
    _cls = _transaction.TransactionProducer

    def send_message_in_transaction(self, message: Message, local_transaction, arg: Any = None):
        """As the async method; a plain `local_transaction` runs in a worker thread, so it may block."""
        if not inspect.iscoroutinefunction(local_transaction):
            plain = local_transaction

            async def local_transaction(message: Message, arg: Any):
                return await asyncio.to_thread(plain, message, arg)

        return self._call(self._target.send_message_in_transaction(message, local_transaction, arg))


class PullConsumer(_Blocking):
    _cls = _pull_consumer.PullConsumer


class PushConsumer(_Blocking):
    _cls = _push_consumer.PushConsumer


class SimpleConsumer(_Blocking):
    _cls = _simple_consumer.SimpleConsumer

    def __exit__(self, *exc) -> None:
        self.close()
