"""AMQP clients (pika) logging in as users of the cluster's ACL, through a gateway in the broker's
process over a broker with authentication on: the secret key is the password (PLAIN and AMQPLAIN),
what they do is decided by the cluster's rules as they are at each method, refusals are RabbitMQ's
403 ACCESS_REFUSED and go to the audit trail; the metadata service's own users still log in; a user's
produce quota blocks that user's publishing connection."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pika
import pytest
from pika.exceptions import AMQPConnectionError, ChannelClosedByBroker

from ferrymq.amqp.acl import needs
from ferrymq.amqp.gateway import Gateway
from ferrymq.amqp.server import AMQPServer
from ferrymq.auth.model import Action, Resource
from ferrymq.broker.quota import Quota
from ferrymq.cli.proxying import local_message_service
from ferrymq.client import Admin
from ferrymq.meta.database import database_url, make_engine
from ferrymq.meta.naming import exchange_resource, queue_group, queue_topic
from ferrymq.meta.service import MetaService
from ferrymq.meta.store import MetaStore
from tests.auth.conftest import ROOT

APP = ("app", "app-secret")
ORDERS_TOPIC, ORDERS_GROUP = queue_topic("/", "orders"), queue_group("/", "orders")


@pytest.fixture
async def acl_gateway(make_secure, tmp_path):
    """A secured broker, the rules of user `app` (declare, publish and consume queue "orders"), and
    a gateway in its process that takes the cluster's users; its AMQP port."""
    secure = await make_secure()
    async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
        await admin.create_user(*APP)
        rules = [f"Topic:{ORDERS_TOPIC}", f"Group:{ORDERS_GROUP}"]
        await admin.create_acl("app", rules, ["Pub", "Sub", "Create"])
    store = MetaStore(make_engine(database_url(tmp_path / "meta")))
    store.ensure_defaults()
    gateway = Gateway(local_message_service(secure.broker), MetaService(store), acl=secure.broker.auth)
    server = AMQPServer("127.0.0.1", 0, gateway)
    port = await server.start()
    yield secure, port
    await server.close()
    store.engine.dispose()


def connect(port: int, user: tuple[str, str], *, amqplain: bool = False) -> pika.BlockingConnection:
    credentials = pika.PlainCredentials(*user)
    if amqplain:
        credentials.TYPE = "AMQPLAIN"  # pika sends the same fields as an AMQP table
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", port, credentials=credentials, connection_attempts=1)
    )


def refused_login(port: int, user: tuple[str, str]) -> str:
    with pytest.raises(AMQPConnectionError) as refused:
        connect(port, user)
    return repr(refused.value)


def publish_and_get(port: int, user: tuple[str, str], *, amqplain: bool = False) -> bytes | None:
    connection = connect(port, user, amqplain=amqplain)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("orders")
        channel.basic_publish("", "orders", b"paid")
        return get_within(channel, "orders", 10)
    finally:
        connection.close()


def get_within(channel, queue: str, timeout_s: float) -> bytes | None:
    """The body of the first message basic.get finds in ``queue`` within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        method, _, body = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            return body
    return None


def refusal(port: int, user: tuple[str, str], act) -> tuple[int, str]:
    """The channel error `act(channel)` ends with."""
    connection = connect(port, user)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        with pytest.raises(ChannelClosedByBroker) as closed:
            act(channel)
        return closed.value.reply_code, closed.value.reply_text
    finally:
        connection.close()


async def test_an_acl_user_logs_in_with_its_secret_key_and_a_wrong_one_is_refused(acl_gateway, caplog):
    _, port = acl_gateway
    assert await asyncio.to_thread(publish_and_get, port, APP) == b"paid"
    assert await asyncio.to_thread(publish_and_get, port, APP, amqplain=True) == b"paid"
    with caplog.at_level(logging.WARNING, logger="ferrymq.audit"):
        wrong = await asyncio.to_thread(refused_login, port, ("app", "not-it"))
        unknown = await asyncio.to_thread(refused_login, port, ("nobody", "x"))
    assert "403" in wrong and "ACCESS_REFUSED - Login was refused" in wrong
    no_vhost = pika.ConnectionParameters(
        "127.0.0.1", port, "nope", pika.PlainCredentials(*APP), connection_attempts=1
    )
    with pytest.raises(AMQPConnectionError) as missing:
        await asyncio.to_thread(pika.BlockingConnection, no_vhost)
    assert "530" in repr(missing.value) and "vhost nope not found" in repr(missing.value)
    assert "403" in unknown
    lines = [r.getMessage() for r in caplog.records if r.name == "ferrymq.audit"]
    assert any(
        "refused user=app amqp=connection.start-ok" in x and "check password failed" in x for x in lines
    )
    assert any("refused user=nobody amqp=connection.start-ok" in x for x in lines), lines
    assert not any("not-it" in x or APP[1] in x for x in lines)


async def test_what_the_rules_do_not_allow_is_refused_with_403(acl_gateway, caplog):
    secure, port = acl_gateway
    async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
        await admin.create_user("writer", "writer-secret")
        await admin.create_acl("writer", [f"Topic:{ORDERS_TOPIC}"], ["Pub"])
    writer = ("writer", "writer-secret")
    await asyncio.to_thread(publish_and_get, port, APP)  # app declares the queue

    def consume(channel) -> None:
        channel.basic_consume("orders", lambda *_: None)

    def declare_other(channel) -> None:
        channel.queue_declare("audit")

    def declare_exchange(channel) -> None:
        channel.exchange_declare("events", "fanout")

    def publish(channel) -> None:
        channel.basic_publish("", "orders", b"x")

    with caplog.at_level(logging.WARNING, logger="ferrymq.audit"):
        consumed = await asyncio.to_thread(refusal, port, writer, consume)
        declared = await asyncio.to_thread(refusal, port, APP, declare_other)
        exchanged = await asyncio.to_thread(refusal, port, APP, declare_exchange)
    assert consumed == (
        403,
        f"ACCESS_REFUSED - access to queue 'orders' in vhost '/' refused for user 'writer': User:writer "
        f"has no permission to access Group:{ORDERS_GROUP} with Sub",
    )
    assert declared[0] == 403 and f"Topic:{queue_topic('/', 'audit')} with Create" in declared[1]
    assert exchanged[0] == 403 and f"Topic:{exchange_resource('/', 'events')} with Create" in exchanged[1]
    lines = [r.getMessage() for r in caplog.records if r.name == "ferrymq.audit"]
    assert any(x.startswith("refused user=writer amqp=basic.consume") for x in lines), lines
    assert any(x.startswith("refused user=app amqp=exchange.declare") for x in lines), lines

    # the writer may publish into "orders" (Pub on its topic), not into a queue it has no Pub on
    connection = await asyncio.to_thread(connect, port, APP)
    channel = await asyncio.to_thread(connection.channel)
    async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
        audit_rules = [f"Topic:{queue_topic('/', 'audit')}", f"Group:{queue_group('/', 'audit')}"]
        await admin.create_acl("app", audit_rules, ["Create", "Sub"])
    await asyncio.to_thread(channel.queue_declare, "audit")
    await asyncio.to_thread(connection.close)

    def publish_audit(channel) -> None:
        channel.basic_publish("", "audit", b"x")

    await asyncio.to_thread(publish_and_get, port, APP)  # still allowed
    code, text = await asyncio.to_thread(refusal, port, writer, publish_audit)
    assert code == 403
    assert text == (
        "ACCESS_REFUSED - access to queue 'audit' in vhost '/' refused for user 'writer': User:writer has "
        f"no permission to access Topic:{queue_topic('/', 'audit')} with Pub"
    )


async def test_a_rule_changed_at_run_time_applies_to_the_next_publish(acl_gateway):
    secure, port = acl_gateway
    connection = await asyncio.to_thread(connect, port, APP)
    try:
        channel = await asyncio.to_thread(connection.channel)
        await asyncio.to_thread(channel.confirm_delivery)
        await asyncio.to_thread(channel.queue_declare, "orders")
        await asyncio.to_thread(channel.basic_publish, "", "orders", b"before")
        async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
            await admin.create_acl("app", [f"Topic:{ORDERS_TOPIC}"], ["Pub"], decision="Deny")
        with pytest.raises(ChannelClosedByBroker) as closed:
            await asyncio.to_thread(channel.basic_publish, "", "orders", b"after")
        assert closed.value.reply_code == 403 and f"Topic:{ORDERS_TOPIC} with Pub" in closed.value.reply_text
    finally:
        await asyncio.to_thread(connection.close)
    async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
        await admin.update_user("app", status="disable")
    assert "403" in await asyncio.to_thread(refused_login, port, APP)


async def test_the_metadata_services_users_still_log_in_and_an_acl_user_wins_a_name_clash(acl_gateway):
    secure, port = acl_gateway
    assert await asyncio.to_thread(publish_and_get, port, ("guest", "guest")) == b"paid"
    async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
        await admin.create_user("guest", "cluster-secret")
    assert "403" in await asyncio.to_thread(refused_login, port, ("guest", "guest"))

    def declare(channel) -> None:
        channel.queue_declare("orders")

    code, text = await asyncio.to_thread(refusal, port, ("guest", "cluster-secret"), declare)
    assert code == 403 and "User:guest has no permission" in text  # in, by the cluster's (no) rules


def consume_until_cancelled(
    port: int, consuming: threading.Event, timeout_s: float
) -> tuple[list[bytes], bool]:
    """`app` consumes "orders" (telling `consuming` once it has had the first message) until the
    gateway cancels its consumer; what it got, and whether the cancel came (within `timeout_s`)."""
    connection = connect(port, APP)
    try:
        channel = connection.channel()
        got: list[bytes] = []
        cancelled: list[str] = []
        channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))

        def received(ch, method, _properties, body) -> None:
            got.append(body)
            ch.basic_ack(method.delivery_tag)
            consuming.set()

        channel.basic_consume("orders", received)
        deadline = time.monotonic() + timeout_s
        while not cancelled and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.05)
        return got, bool(cancelled)
    finally:
        connection.close()


async def test_a_consumer_whose_user_loses_read_on_its_queue_is_cancelled(acl_gateway):
    """Revoking Sub stops a running consumer at once (basic.cancel, as for a deleted queue), not at
    its next method: it has none. What is published after goes to nobody but a reader allowed."""
    secure, port = acl_gateway
    assert await asyncio.to_thread(publish_and_get, port, APP) == b"paid"  # declares "orders"
    consuming = threading.Event()
    consumer = asyncio.ensure_future(asyncio.to_thread(consume_until_cancelled, port, consuming, 15))
    root = await asyncio.to_thread(connect, port, ROOT)
    try:
        channel = await asyncio.to_thread(root.channel)
        await asyncio.to_thread(channel.confirm_delivery)
        await asyncio.to_thread(channel.basic_publish, "", "orders", b"before")
        assert await asyncio.to_thread(consuming.wait, 15)
        async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
            await admin.create_acl("app", [f"Group:{ORDERS_GROUP}"], ["Sub"], decision="Deny")
        got, cancelled = await consumer
        assert cancelled and got == [b"before"]
        await asyncio.to_thread(channel.basic_publish, "", "orders", b"after")
        assert await asyncio.to_thread(get_within, channel, "orders", 10) == b"after"
    finally:
        await asyncio.to_thread(root.close)


async def test_an_auto_delete_queue_goes_with_its_last_consumer_revoked(acl_gateway):
    secure, port = acl_gateway
    scratch = [f"Topic:{queue_topic('/', 'scratch')}", f"Group:{queue_group('/', 'scratch')}"]
    async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
        await admin.create_acl("app", scratch, ["Sub", "Create"])
    connection = await asyncio.to_thread(connect, port, APP)
    try:
        channel = await asyncio.to_thread(connection.channel)
        await asyncio.to_thread(channel.queue_declare, "scratch", auto_delete=True)
        await asyncio.to_thread(channel.basic_consume, "scratch", lambda *_: None)
        async with Admin(secure.namesrv_addr, access_key=ROOT[0], secret_key=ROOT[1]) as admin:
            await admin.delete_acl("app", [scratch[1]])
        gone = False
        async with asyncio.timeout(10):
            while not gone:
                try:
                    await asyncio.to_thread(channel.queue_declare, "scratch", passive=True)
                    await asyncio.sleep(0.05)
                except ChannelClosedByBroker as e:
                    assert e.reply_code == 404, e
                    gone = True
    finally:
        await asyncio.to_thread(connection.close)


def publish_blocked(port: int, user: tuple[str, str], count: int) -> list[str]:
    seen: list[str] = []
    connection = connect(port, user)
    try:
        connection.add_on_connection_blocked_callback(lambda _c, m: seen.append(m.method.reason))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("orders")
        for i in range(count):
            channel.basic_publish("", "orders", b"%d" % i)
        connection.process_data_events(time_limit=0.2)  # pika hands blocked/unblocked over here
        return seen
    finally:
        connection.close()


async def test_a_users_produce_quota_blocks_that_users_connection(acl_gateway):
    secure, port = acl_gateway
    secure.broker.quotas.set(Quota("produce", "User:app", messages=20))
    seen = await asyncio.to_thread(publish_blocked, port, APP, 30)
    assert seen and seen[0].startswith("flow control: quota exceeded: User:app may produce 20 messages/s")
    assert await asyncio.to_thread(publish_blocked, port, ("guest", "guest"), 30) == []  # not guest's


def receipts(port: int, user: tuple[str, str], queue: str, seconds: float, enough: int = 0) -> list[float]:
    """When `user`'s consumer of `queue` got each message, over `seconds` from the first (or until
    it has `enough`); empty when none came within 10 s."""
    connection = connect(port, user)
    try:
        channel = connection.channel()
        got: list[float] = []

        def received(ch, method, _properties, _body) -> None:
            got.append(time.monotonic())
            ch.basic_ack(method.delivery_tag)  # what is unacknowledged at the close goes back

        channel.basic_consume(queue, received)
        deadline = time.monotonic() + 10  # the first one
        while not got and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.05)
        while got and time.monotonic() < got[0] + seconds and len(got) != enough:
            connection.process_data_events(time_limit=0.05)
        return got
    finally:
        connection.close()


def publish_many(port: int, user: tuple[str, str], queue: str, count: int) -> None:
    connection = connect(port, user)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(queue)
        for i in range(count):
            channel.basic_publish("", queue, b"%d" % i)
    finally:
        connection.close()


async def test_a_users_consume_quota_holds_for_its_amqp_consumers(acl_gateway):
    """A queue's consumers share one pop, yet each user gets no more than its consume quota: 20
    messages/s (and a burst of 2) for `app`'s consumer of a queue holding 100, while root's, without
    a quota, takes the rest at once."""
    secure, port = acl_gateway
    await asyncio.to_thread(publish_many, port, APP, "orders", 100)
    secure.broker.quotas.set(Quota("consume", "User:app", messages=20))
    limited = time.monotonic()  # app's bucket is full (2 messages) from here, and fills at 20/s
    secure.broker.quotas.set(Quota("consume", "User:app", messages=20))
    taken = await asyncio.to_thread(receipts, port, APP, "orders", 1.0)
    assert 5 <= len(taken) <= 2 + 20 * (taken[-1] - limited) + 1, (len(taken), taken[-1] - limited)
    rest = await asyncio.to_thread(receipts, port, ROOT, "orders", 10.0, 100 - len(taken))
    assert len(rest) == 100 - len(taken) and rest[-1] - rest[0] < 2.0  # at 20/s it would take 4 s


def test_rabbitmq_permissions_map_onto_actions_on_the_queues_topic_and_group():
    topic, group = Resource.topic(ORDERS_TOPIC), Resource.group(ORDERS_GROUP)
    events = Resource.topic(exchange_resource("/", "events"))
    pub, sub = frozenset({Action.PUB}), frozenset({Action.SUB})
    create, delete = frozenset({Action.CREATE}), frozenset({Action.DELETE})
    assert needs("configure", "queue", "/", "orders", (50, 10)) == [(topic, create), (group, create)]
    assert needs("configure", "queue", "/", "orders", (50, 40)) == [(topic, delete), (group, delete)]
    assert needs("write", "queue", "/", "orders", (50, 20)) == [(topic, pub)]  # queue.bind
    assert needs("read", "queue", "/", "orders", (60, 20)) == [(group, sub), (topic, sub)]
    assert needs("configure", "exchange", "/", "events", (40, 10)) == [(events, create)]
    assert needs("configure", "exchange", "/", "events", (40, 20)) == [(events, delete)]
    assert needs("write", "exchange", "/", "events", (60, 40)) == []  # checked at the queues it reaches
    assert needs("read", "exchange", "/", "events", (50, 20)) == []
