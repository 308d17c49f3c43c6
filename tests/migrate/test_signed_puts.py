"""Draining straight into the brokers of a cluster with authentication on: the migrator signs its
puts with the keys it is given (--access-key/--secret-key), so the queue is stored directly and
nothing is lost; without keys the brokers refuse it, and the queue goes through the gateway."""

from __future__ import annotations

from collections.abc import Iterator

import pika
import pytest

from tests.migrate.conftest import DIRECT, Source, Target, migrate, running_target

ROOT = ("root", "root-secret")  # the cluster's first super user, who logs in to the gateway too


@pytest.fixture(scope="module")
def secure(tmp_path_factory) -> Iterator[Target]:
    with running_target(tmp_path_factory.mktemp("migrate-secure"), auth_user=ROOT) as running:
        yield running


def _fill(source: Source, queue: str, count: int) -> None:
    with source.connect() as c:
        ch = c.channel()
        ch.confirm_delivery()
        for i in range(count):
            ch.basic_publish("", queue, f"body {i}".encode(), pika.BasicProperties(message_id=f"m{i}"))


def _ids_in(target: Target, queue: str) -> list[str]:
    with target.connect() as c:
        ch = c.channel()
        got = []
        while (m := ch.basic_get(queue, auto_ack=True))[0] is not None:
            got.append(m[1].message_id)
    return got


@pytest.mark.parametrize(
    "keys", [("--access-key", ROOT[0], "--secret-key", ROOT[1]), ()], ids=["signed", "unsigned"]
)
def test_signed_puts_go_straight_into_a_secured_cluster(
    source: Source, secure: Target, keys: tuple[str, ...]
) -> None:
    count = 2000
    queue = source.queue("signed")
    _fill(source, queue, count)

    done = migrate(secure, "-q", queue, "--prefetch", "300", "--namesrv", secure.namesrv, *keys)

    assert f"{count:,} moved" in done.stdout
    assert (DIRECT in done.stdout) == bool(keys), done.stdout
    assert source.count(queue) == 0
    assert _ids_in(secure, queue) == [f"m{i}" for i in range(count)]  # all of them, in order
