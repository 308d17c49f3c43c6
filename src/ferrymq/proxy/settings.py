"""The settings the proxy answers a client's Telemetry settings with (RocketMQ proxy's merge): the
client's own fields, plus what the server decides — retry policy, batch size and long polling for
consumers, body size limit for producers."""

from __future__ import annotations

from ferrymq.messaging.api import DEFAULT_MAX_BODY_SIZE, SubscriptionGroupConfig
from ferrymq.proxy.v2 import messaging_pb2 as pb

RECEIVE_BATCH_SIZE = 32
LONG_POLLING_TIMEOUT_S = 20
PRODUCER_MAX_ATTEMPTS = 3
CONSUMER_MAX_ATTEMPTS = 17  # a group's retryMaxTimes (16) + the first delivery
# RocketMQ's delay levels 1s..2h: the wait before each redelivery. Sent as a customized backoff since
# the Python client ignores an exponential one for consumers.
RETRY_LADDER_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
CONSUMER_TYPES = frozenset((pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER, pb.PULL_CONSUMER))


def merged(
    client: pb.Settings,
    group: SubscriptionGroupConfig | None = None,
    *,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
) -> pb.Settings:
    """The settings to answer `client`'s with; a consumer's follow its group's config where the
    broker has one (orderly: fifo; retry_max_times + 1 attempts), a producer's the body size limit
    of the message service behind the proxy."""
    out = pb.Settings()
    out.CopyFrom(client)
    if client.client_type == pb.PRODUCER:
        policy = out.backoff_policy
        policy.Clear()
        policy.max_attempts = PRODUCER_MAX_ATTEMPTS
        policy.exponential_backoff.initial.FromMilliseconds(10)
        policy.exponential_backoff.max.FromMilliseconds(1000)
        policy.exponential_backoff.multiplier = 2.0
        out.publishing.max_body_size = max_body_size
        out.publishing.validate_message_type = True
    elif client.client_type in CONSUMER_TYPES:
        policy = out.backoff_policy
        policy.Clear()
        policy.max_attempts = CONSUMER_MAX_ATTEMPTS if group is None else group.retry_max_times + 1
        for seconds in RETRY_LADDER_S:
            policy.customized_backoff.next.add().FromSeconds(seconds)
        sub = out.subscription
        sub.receive_batch_size = RECEIVE_BATCH_SIZE
        sub.long_polling_timeout.FromSeconds(LONG_POLLING_TIMEOUT_S)
        sub.fifo = group is not None and group.consume_message_orderly
    out.metric.Clear()
    out.metric.on = False
    return out
