"""How long a nacked pop message stays invisible: the group's RocketMQ 5 groupRetryPolicy."""

from __future__ import annotations

from ferrymq.protocol.bodies import CustomizedRetryPolicy, ExponentialRetryPolicy, GroupRetryPolicy

_CUSTOMIZED = CustomizedRetryPolicy()
_EXPONENTIAL = ExponentialRetryPolicy()


def next_delay_ms(policy: GroupRetryPolicy, reconsume_times: int) -> int:
    """The delay before attempt `reconsume_times + 2`, after the message was delivered
    `reconsume_times + 1` times. CUSTOMIZED walks the ladder from its third step (10 s), as
    RocketMQ's CustomizedRetryPolicy; EXPONENTIAL is initial * multiplier ** times, at most max."""
    times = max(reconsume_times, 0)
    if policy.type == "EXPONENTIAL":
        p = policy.exponential_retry_policy or _EXPONENTIAL
        return min(p.max, p.initial * p.multiplier ** min(times, 32))
    ladder = (policy.customized_retry_policy or _CUSTOMIZED).next or _CUSTOMIZED.next
    return ladder[min(times + 2, len(ladder) - 1)]
