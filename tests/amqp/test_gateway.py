"""Gateway behaviours best seen frame by frame, with a gateway in this process (and the raw client in
a thread): the consumer timeout and connection.update-secret."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from pamqp import body as content_body
from pamqp import commands, frame
from pamqp import header as content_header

from ferrymq.amqp.gateway import GatewayLimits
from ferrymq.client.admin import Admin
from ferrymq.meta.access import hash_password
from ferrymq.meta.entities import Permission, User
from ferrymq.meta.naming import queue_group
from tests.amqp.raw_client import RawClient


def consume_without_ack(port: int) -> tuple[int, str]:
    client = RawClient("127.0.0.1", port)
    try:
        client.open()
        client.open_channel(1)
        client.declare(1, "slow")
        client.publish(1, "", "slow", b"never acked")
        client.consume(1, "slow")
        close = client.expect(commands.Channel.Close, 1)
        return close.reply_code, close.reply_text
    finally:
        client.close()


async def test_a_delivery_unacked_past_the_consumer_timeout_closes_its_channel(make_local_gateway):
    served = await make_local_gateway(GatewayLimits(consumer_timeout_ms=300))
    assert await asyncio.to_thread(consume_without_ack, served.port) == (
        406,
        "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: 300 ms. "
        "This timeout value can be configured, see consumers doc guide to learn more",
    )


def update_secret(port: int, secret: str):
    client = RawClient("127.0.0.1", port)
    try:
        client.open()
        client.send(0, commands.Connection.UpdateSecret(new_secret=secret, reason="rotation"))
        _, answer = client.next_frame()
        return answer
    finally:
        client.close()


async def test_update_secret_is_taken_as_rabbitmq_takes_it_for_its_own_users(local_gateway):
    """RabbitMQ's internal users accept any new secret (it matters to token backends); amqplib's suite
    checks that update-secret-ok comes back."""
    accepted = await asyncio.to_thread(update_secret, local_gateway.port, "new secret")
    assert isinstance(accepted, commands.Connection.UpdateSecretOk)


def declare_as(port: int, user: str, password: str, queue: str):
    client = RawClient("127.0.0.1", port)
    try:
        client.open(user=user, password=password)
        client.open_channel(1)
        client.send(1, commands.Queue.Declare(queue=queue))
        _, answer = client.next_frame()
        return answer
    finally:
        client.close()


async def test_permissions_of_the_metadata_service_are_enforced(local_gateway):
    metadata = local_gateway.gateway.metadata
    await metadata.put_user(User(name="app", password_hash=hash_password("pw")))
    await metadata.set_permission(
        Permission(user="app", vhost="/", configure="^app-", write="^app-", read="^app-")
    )
    allowed = await asyncio.to_thread(declare_as, local_gateway.port, "app", "pw", "app-orders")
    assert isinstance(allowed, commands.Queue.DeclareOk)
    refused = await asyncio.to_thread(declare_as, local_gateway.port, "app", "pw", "billing")
    assert isinstance(refused, commands.Channel.Close)
    assert (refused.reply_code, refused.reply_text) == (
        403,
        "ACCESS_REFUSED - access to queue 'billing' in vhost '/' refused for user 'app'",
    )


def consume_through_pause(port: int, control) -> list[str]:
    """Consume a queue; `control(step)` pauses its group before the second publish and resumes it after
    checking that nothing came meanwhile. What arrived, and when ("before" / "paused" / "resumed")."""
    client = RawClient("127.0.0.1", port)
    seen = []
    try:
        client.open()
        client.open_channel(1)
        client.declare(1, "pausable")
        client.consume(1, "pausable", no_ack=True)
        client.publish(1, "", "pausable", b"one")
        client.expect(commands.Basic.Deliver)
        seen.append("before")
        control("pause")
        client.publish(1, "", "pausable", b"two")
        client.sock.settimeout(1.5)  # a paused group gets nothing: wait a bounded while for a delivery
        try:
            client.expect(commands.Basic.Deliver)
            seen.append("paused")
        except (TimeoutError, OSError):
            pass
        client.sock.settimeout(10)
        control("resume")
        client.expect(commands.Basic.Deliver)
        seen.append("resumed")
        return seen
    finally:
        client.close()


async def test_the_brokers_consumption_controls_apply_to_amqp_consumers(local_gateway):
    """`ferrymq admin pause/resume` on the queue's consumer group stops and restarts its consumers."""
    loop = asyncio.get_running_loop()
    admin = Admin(f"127.0.0.1:{local_gateway.cluster.namesrv.port}")
    group = queue_group("/", "pausable")

    def control(step: str) -> None:
        action = admin.pause(group) if step == "pause" else admin.resume(group)
        asyncio.run_coroutine_threadsafe(action, loop).result(10)

    try:
        assert await asyncio.to_thread(consume_through_pause, local_gateway.port, control) == [
            "before",
            "resumed",
        ]
    finally:
        await admin.shutdown()


def publish_until_blocked(port: int, disk: Callable[[bool], None]) -> list[str]:
    """Publish with confirms; `disk(True)` fills the broker's disk (as its housekeeping sees it), and
    later `disk(False)` frees it. What the client saw, in order."""
    client = RawClient("127.0.0.1", port)
    seen = []
    try:
        client.open(capabilities={"connection.blocked": True})
        client.open_channel(1)
        client.declare(1, "alarmed")
        client.send(1, commands.Confirm.Select())
        client.expect(commands.Confirm.SelectOk)
        disk(True)
        client.publish(1, "", "alarmed", b"refused")
        answers = [client.next_frame()[1] for _ in range(2)]  # the nack, and blocked (sent first)
        seen += sorted(
            f"blocked: {a.reason}" if isinstance(a, commands.Connection.Blocked) else type(a).__name__
            for a in answers
        )
        disk(False)
        client.expect(commands.Connection.Unblocked, 0)
        seen.append("unblocked")
        client.publish(1, "", "alarmed", b"taken")
        seen.append(type(client.expect(commands.Basic.Ack)).__name__)
        return seen
    finally:
        client.close()


async def test_a_broker_that_cannot_write_blocks_publishers_until_it_can(local_gateway):
    """RabbitMQ's resource alarm: connection.blocked with the reason, unblocked once writes are taken."""
    loop, store = asyncio.get_running_loop(), local_gateway.cluster.broker.store
    normal = store.config.disk_space_warning_level_ratio

    def disk(full: bool) -> None:
        def check() -> None:
            store.config.disk_space_warning_level_ratio = 0 if full else normal
            store.retention.check_disk()  # the store's own housekeeping pass

        loop.call_soon_threadsafe(check)

    seen = await asyncio.to_thread(publish_until_blocked, local_gateway.port, disk)
    assert seen[0] == "Nack"
    assert seen[1].startswith("blocked: low on resources: disk full")
    assert seen[2:] == ["unblocked", "Ack"]


def publish_then_close_at_once(port: int) -> list[bytes]:
    """Publishes and the channel's close in one write, no confirms: every publish is stored (they came
    before the close), then read back on another channel."""
    client = RawClient("127.0.0.1", port)
    try:
        client.open()
        client.open_channel(1)
        client.declare(1, "closed-after")
        for body in (b"p1", b"p2", b"p3"):
            client.publish(1, "", "closed-after", body)
        client.send(1, commands.Channel.Close(200, "done", 0, 0))
        client.expect(commands.Channel.CloseOk, 1)
        client.open_channel(2)
        got = []
        for _ in range(3):
            client.send(2, commands.Basic.Get(queue="closed-after", no_ack=True))
            client.expect(commands.Basic.GetOk)
            client.next_frame()  # the content header
            got.append(client.next_frame()[1].value)
        return got
    finally:
        client.close()


async def test_publishes_before_a_channel_close_are_all_stored(local_gateway):
    assert await asyncio.to_thread(publish_then_close_at_once, local_gateway.port) == [b"p1", b"p2", b"p3"]


def publish_alike_and_not(port: int) -> list[tuple[str, str, dict, bytes]]:
    """Publishes alike and unalike back to back; each comes back with its own routing key and properties
    (the gateway reuses the mapping of a publish alike to the one before)."""
    persistent = commands.Basic.Properties(delivery_mode=2)
    tagged = commands.Basic.Properties(delivery_mode=2, message_id="m2", content_type="text/plain")
    sent = [
        ("alike", persistent, b"0"),
        ("alike", persistent, b"1"),
        ("alike", tagged, b"2"),
        ("alike", persistent, b"3"),
        ("alike-too", persistent, b"4"),
        ("alike", persistent, b"5"),
    ]
    client = RawClient("127.0.0.1", port)
    try:
        client.open()
        client.open_channel(1)
        for queue in ("alike", "alike-too"):
            client.declare(1, queue)
        for routing_key, properties, body in sent:
            client.publish(1, "", routing_key, body, properties)
        got = []
        for queue, count in (("alike", 5), ("alike-too", 1)):
            for _ in range(count):
                client.send(1, commands.Basic.Get(queue=queue, no_ack=True))
                get_ok = client.expect(commands.Basic.GetOk)
                _, header = client.next_frame()
                _, body = client.next_frame()
                properties = {k: v for k, v in dict(header.properties).items() if v}
                got.append((queue, get_ok.routing_key, properties, body.value))
        return got
    finally:
        client.close()


async def test_publishes_alike_and_unalike_keep_their_own_properties(local_gateway):
    got = await asyncio.to_thread(publish_alike_and_not, local_gateway.port)
    persistent = {"delivery_mode": 2}
    tagged = {"delivery_mode": 2, "message_id": "m2", "content_type": "text/plain"}
    assert got == [
        ("alike", "alike", persistent, b"0"),
        ("alike", "alike", persistent, b"1"),
        ("alike", "alike", tagged, b"2"),
        ("alike", "alike", persistent, b"3"),
        ("alike", "alike", persistent, b"5"),
        ("alike-too", "alike-too", persistent, b"4"),
    ]


def stream_exactly_two_reads(port: int) -> tuple[int, float]:
    """64 publishes of 128 bytes, sent at once: two full 4 KiB reads for the gateway, then nothing. Its
    confirms, held back while the reads came full, must still come soon (the publisher waits for them):
    (the last tag confirmed, seconds it took)."""
    client = RawClient("127.0.0.1", port)
    try:
        client.open()
        client.open_channel(1)
        client.declare(1, "streamed")
        client.send(1, commands.Confirm.Select())
        client.expect(commands.Confirm.SelectOk)
        frames = [
            frame.marshal(commands.Basic.Publish(exchange="", routing_key="streamed"), 1)
            + frame.marshal(content_header.ContentHeader(0, 73, commands.Basic.Properties()), 1)
            + frame.marshal(content_body.ContentBody(b"x" * 73), 1)
            for _ in range(64)
        ]
        assert {len(f) for f in frames} == {128}
        started = time.monotonic()
        client.sock.sendall(b"".join(frames))
        confirmed = 0
        while confirmed < 64:
            ack = client.expect(commands.Basic.Ack, 1)
            confirmed = ack.delivery_tag
        return confirmed, time.monotonic() - started
    finally:
        client.close()


async def test_a_peer_that_streams_gets_its_confirms_when_it_stops(local_gateway):
    confirmed, seconds = await asyncio.to_thread(stream_exactly_two_reads, local_gateway.port)
    assert confirmed == 64
    assert seconds < 5.0
