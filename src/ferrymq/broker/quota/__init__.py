"""Quotas: production and consumption rates (messages/s, bytes/s) per topic, user and group, and
connections per user, each enforced by every broker on its own.

The model is pure (model.py); the limiter holds token buckets and answers the put, read and
connection paths (limiter.py); persistence, the admin request processor and the remoting guard sit
apart. Nothing is checked, beyond one truth test per request, while no quota is set.
"""

from ferrymq.broker.quota.limiter import QuotaLimiter
from ferrymq.broker.quota.model import Quota, QuotaError

__all__ = ["Quota", "QuotaError", "QuotaLimiter"]
