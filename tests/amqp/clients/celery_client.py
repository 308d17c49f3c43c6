"""Sends tasks to the Celery worker through the gateway and prints one JSON line with their results.
Usage (BROKER_URL and CELERY_QUEUE set): celery_client.py."""

from __future__ import annotations

import json

from celery import chain, group
from celery_app import add, flaky

WAIT = 30
single = [add.delay(i, i) for i in range(10)]
result = {
    "single": [r.get(timeout=WAIT) for r in single],
    "retried": flaky.delay(4).get(timeout=WAIT),
    "group": group(add.s(i, 1) for i in range(5))().get(timeout=WAIT),
    "chain": chain(add.s(1, 2), add.s(3))().get(timeout=WAIT),
}
print(json.dumps(result), flush=True)
