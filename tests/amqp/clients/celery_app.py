"""A Celery application for the gateway's tests: broker from BROKER_URL (the gateway), results through
Celery's rpc:// backend (replies over AMQP too), tasks on the queue CELERY_QUEUE."""

from __future__ import annotations

import os

from celery import Celery

app = Celery("ferrymq_compat", broker=os.environ["BROKER_URL"], backend="rpc://")
app.conf.update(
    task_default_queue=os.environ["CELERY_QUEUE"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task(bind=True, max_retries=2)
def flaky(self, n: int) -> int:
    """Fails its first attempt: Celery retries it (a new message after a countdown)."""
    if self.request.retries < 1:
        raise self.retry(countdown=0.2)
    return n * 10
