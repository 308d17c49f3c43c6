"""The check every RocketMQ 5 gRPC call passes on a proxy with authentication on.

Clients sign ``x-mq-date-time`` (``authorization: MQv2-HMAC-SHA1 Credential=<ak>,
SignedHeaders=x-mq-date-time, Signature=<hex>``); the signature is checked against the same users as
remoting (hex compared without regard to case), the date-time must be within ``max_skew_s`` of now
(0: not checked, as RocketMQ), and each request is authorised by what it touches (RocketMQ's
DefaultAuthorizationContextBuilder for gRPC). Refusals end the call with UNAUTHENTICATED or
PERMISSION_DENIED and go to the audit trail.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable

import grpc

from ferrymq.auth import audit
from ferrymq.auth.decision import source_address
from ferrymq.auth.model import Action, Resource
from ferrymq.auth.registry import AuthError, AuthRegistry
from ferrymq.protocol.acl_signing import grpc_authorization, grpc_signature_matches
from ferrymq.protocol.caller import CALLER

DATE_TIME = "x-mq-date-time"
_PUB, _SUB, _ROUTE = frozenset({Action.PUB}), frozenset({Action.SUB}), frozenset({Action.PUB, Action.SUB})
_CONSUMER_TYPES = {2, 3, 4}  # ClientType PUSH_CONSUMER, SIMPLE_CONSUMER, PULL_CONSUMER

Need = tuple[Resource, frozenset[Action]]


def _group_and_topic(request) -> list[Need]:
    return [(Resource.group(request.group.name), _SUB), (Resource.topic(request.topic.name), _SUB)]


_NEEDS: dict[str, Callable[[object], list[Need]]] = {
    "QueryRoute": lambda r: [(Resource.topic(r.topic.name), _ROUTE)],  # type: ignore[attr-defined]
    "SendMessage": lambda r: [(Resource.topic(m.topic.name), _PUB) for m in r.messages[:1]],  # type: ignore[attr-defined]
    "EndTransaction": lambda r: [(Resource.topic(r.topic.name), _PUB)],  # type: ignore[attr-defined]
    "Heartbeat": lambda r: (
        [(Resource.group(r.group.name), _SUB)] if r.client_type in _CONSUMER_TYPES else []  # type: ignore[attr-defined]
    ),
    "ReceiveMessage": lambda r: [
        (Resource.group(r.group.name), _SUB),  # type: ignore[attr-defined]
        (Resource.topic(r.message_queue.topic.name), _SUB),  # type: ignore[attr-defined]
    ],
    "AckMessage": _group_and_topic,
    "ForwardMessageToDeadLetterQueue": _group_and_topic,
    "QueryAssignment": _group_and_topic,
    "ChangeInvisibleDuration": lambda r: [(Resource.group(r.group.name), _SUB)],  # type: ignore[attr-defined]
    "NotifyClientTermination": lambda r: [(Resource.group(r.group.name), _SUB)],  # type: ignore[attr-defined]
}


class Refused(Exception):
    def __init__(self, status: grpc.StatusCode, reason: str, who: str | None) -> None:
        super().__init__(reason)
        self.status = status
        self.who = who


class GrpcGate(grpc.aio.ServerInterceptor):
    def __init__(self, registry: AuthRegistry, *, max_skew_s: float = 900.0) -> None:
        self.registry = registry
        self.max_skew_s = max_skew_s

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method.rsplit("/", 1)[-1]
        if handler.unary_unary is not None:
            inner = handler.unary_unary

            async def unary(request, context):
                await self._check(method, request, context)
                return await inner(request, context)

            return grpc.unary_unary_rpc_method_handler(
                unary, handler.request_deserializer, handler.response_serializer
            )
        if handler.unary_stream is not None:
            streamed = handler.unary_stream

            async def unary_stream(request, context):
                await self._check(method, request, context)
                async for response in streamed(request, context):
                    yield response

            return grpc.unary_stream_rpc_method_handler(
                unary_stream, handler.request_deserializer, handler.response_serializer
            )
        if handler.stream_stream is not None:  # Telemetry: the caller is authenticated, not each command
            both = handler.stream_stream

            async def stream_stream(requests, context):
                await self._check(method, None, context)
                async for response in both(requests, context):
                    yield response

            return grpc.stream_stream_rpc_method_handler(
                stream_stream, handler.request_deserializer, handler.response_serializer
            )
        return handler

    async def _check(self, method: str, request, context) -> None:
        try:
            user = self.check(
                method, request, dict(context.invocation_metadata() or ()), context.peer() or ""
            )
            CALLER.set(user)  # the call's handler runs in this task: its puts and reads know the user
        except Refused as e:
            audit.refused(e.who, f"rpc={method}", context.peer(), str(e))
            await context.abort(e.status, str(e))

    def check(self, method: str, request, metadata: dict[str, str], peer: str) -> str:
        """The AccessKey of the call; Refused unless it is signed by an enabled user allowed to make it."""
        parsed = grpc_authorization(str(metadata.get("authorization", "")))
        if parsed is None:
            raise Refused(
                grpc.StatusCode.UNAUTHENTICATED, "authentication header is missing or malformed", None
            )
        access_key, signature = parsed
        date_time = str(metadata.get(DATE_TIME, ""))
        try:
            user = self.registry.user_for(access_key)
        except AuthError as e:
            raise Refused(grpc.StatusCode.UNAUTHENTICATED, str(e), access_key) from None
        if not grpc_signature_matches(signature, date_time, user.password):
            raise Refused(grpc.StatusCode.UNAUTHENTICATED, "check signature failed", access_key)
        if self.max_skew_s and not self._recent(date_time):
            raise Refused(
                grpc.StatusCode.UNAUTHENTICATED, f"{DATE_TIME} {date_time!r} is too far from now", access_key
            )
        build = _NEEDS.get(method)
        if request is None or build is None:
            return access_key
        ip = source_address(peer.split(":", 1)[1] if peer.startswith(("ipv4:", "ipv6:")) else peer)
        try:
            for resource, actions in build(request):
                self.registry.authorize(user, resource, actions, ip)
        except AuthError as e:
            raise Refused(grpc.StatusCode.PERMISSION_DENIED, str(e), access_key) from None
        return access_key

    def _recent(self, date_time: str) -> bool:
        try:
            then = calendar.timegm(time.strptime(date_time, "%Y%m%dT%H%M%SZ"))
        except ValueError:
            return False
        return abs(time.time() - then) <= self.max_skew_s
