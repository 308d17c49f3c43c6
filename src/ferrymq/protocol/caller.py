"""Who a request is served for, where a front checked it itself (the gRPC proxy's gate) and the
messaging core is called in the same task: the AccessKey, read by the put and read paths for
per-user quotas. Remoting requests carry theirs in their fields instead."""

from __future__ import annotations

from contextvars import ContextVar

CALLER: ContextVar[str | None] = ContextVar("ferrymq_caller", default=None)
