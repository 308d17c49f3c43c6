"""Moving a topic between broker groups and clusters, against real in-process NameServers and brokers:
under a running producer and consumer nothing acknowledged is lost, and a move whose target goes
away or whose drain does not finish is undone (the source writable again, the target cleaned)."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.client import Admin, Message, Producer, PushConsumer, offset_store, rebalancer
from ferrymq.client.instance import ClientError, ClientInstance
from ferrymq.client.message import MessageQueue
from ferrymq.client.topic_move import MoveError, MoveEvent, StepKind, TopicMover
from ferrymq.protocol.codes import RequestCode, ResponseCode

from ..broker.conftest import make_cluster  # noqa: F401  (fixture)
from .test_admin import eventually

REFRESH = 0.2  # route refresh, rebalance and offset commits of the test's clients, in seconds


@pytest.fixture
def quick_clients(monkeypatch):
    monkeypatch.setattr(rebalancer, "REBALANCE_INTERVAL", REFRESH)
    monkeypatch.setattr(offset_store, "PERSIST_INTERVAL", REFRESH)


async def two_broker_groups(make_cluster, tmp_path):  # noqa: F811
    """One NameServer with broker groups broker-a and broker-b, and an Admin on it."""
    a = await make_cluster()
    b = await make_cluster(namesrv=a.namesrv, broker_name="broker-b", store_path_root_dir=tmp_path / "b")
    admin = Admin(a.namesrv_addr)
    await eventually(lambda: _masters(admin, {"broker-a", "broker-b"}), "both broker groups")
    return a, b, admin


async def two_groups(make_cluster, tmp_path):  # noqa: F811
    """Two broker groups; the topic Orders on broker-a only."""
    a, b, admin = await two_broker_groups(make_cluster, tmp_path)
    await admin.create_topic("Orders", 4, brokers=["broker-a"])
    await eventually(lambda: _on(admin, "Orders", {"broker-a"}), "the route on broker-a")
    return a, b, admin


async def _masters(admin: Admin, names: set[str]) -> bool:
    return set(await admin.masters()) >= names


async def _on(admin: Admin, topic: str, brokers: set[str]) -> bool:
    route = await admin.instance.existing_route(topic)
    return route is not None and {q.broker_name for q in route.data.queue_datas} == brokers


def client(namesrv: str) -> ClientInstance:
    return ClientInstance(namesrv, route_refresh=REFRESH)


class Recorder:
    """Progress events by kind, for assertions."""

    def __init__(self) -> None:
        self.events: list[MoveEvent] = []

    def __call__(self, event: MoveEvent) -> None:
        self.events.append(event)

    def states(self, kind: StepKind) -> list[str]:
        return [e.state for e in self.events if e.step.kind is kind]


async def test_move_between_broker_groups_under_load_loses_nothing(make_cluster, tmp_path, quick_clients):  # noqa: F811
    a, b, admin = await two_groups(make_cluster, tmp_path)
    consumed: set[str] = set()
    consumer = PushConsumer("Billing", a.namesrv_addr, consume_from="first", instance=client(a.namesrv_addr))
    consumer.subscribe("Orders", "*", lambda msgs: consumed.update(m.body.decode() for m in msgs))
    await consumer.start()
    acked: set[str] = set()
    started = asyncio.Event()

    async def produce(producer: Producer) -> None:
        for i in range(400):
            try:
                await producer.send(Message("Orders", f"m{i}".encode()))
            except ClientError:
                continue  # not acknowledged: the producer saw the failure, nothing was promised
            acked.add(f"m{i}")
            if i == 50:
                started.set()
            await asyncio.sleep(0.005)

    progress = Recorder()
    async with Producer("Shop", a.namesrv_addr, instance=client(a.namesrv_addr)) as producer:
        sending = asyncio.create_task(produce(producer))
        await asyncio.wait_for(started.wait(), 10)
        mover = TopicMover(admin, poll_interval=0.2, drain_timeout=30, progress=progress)
        move = await mover.plan("Orders", ["broker-b"])
        assert move.source == ("broker-a",) and move.target == ("broker-b",)
        assert [s.kind for s in move.steps] == [
            StepKind.CREATE_GROUPS, StepKind.CREATE_TOPIC, StepKind.START_OFFSETS, StepKind.STOP_WRITES,
            StepKind.DRAIN, StepKind.DELETE_TOPIC, StepKind.DELETE_GROUPS, StepKind.CREATE_RETRY,
        ]  # fmt: skip
        await mover.execute(move)
        await sending
    await eventually(lambda: _has_all(consumed, acked), "every acknowledged message consumed", 20)
    await consumer.shutdown()

    assert len(acked) > 300  # the move did not stop the producer for long
    assert all(
        s == ["start", "done"] for k in StepKind if (s := progress.states(k)) and k is not StepKind.DRAIN
    )
    assert [e.lag for e in progress.events if e.state == "lag"][-1] == 0
    assert await _on(admin, "Orders", {"broker-b"})
    assert "Orders" not in (await admin.all_topic_config(a.broker_addr)).topic_config_table
    b_topics = (await admin.all_topic_config(b.broker_addr)).topic_config_table
    assert "%RETRY%Billing" in b_topics and b_topics["Orders"].perm == 6
    assert "Billing" in (await admin.all_group_config(b.broker_addr)).subscription_group_table
    assert "Billing" not in (await admin.all_group_config(a.broker_addr)).subscription_group_table
    await admin.shutdown()


async def _has_all(consumed: set[str], acked: set[str]) -> bool:
    return acked <= consumed


async def _stored_messages(admin: Admin, topic: str, count: int) -> None:
    async with Producer("Shop", admin.instance.namesrvs[0]) as producer:
        for i in range(count):
            await producer.send(Message(topic, f"m{i}".encode()))


async def _group_with_offsets(admin: Admin, addr: str, broker: str, group: str) -> None:
    """A group that consumed nothing yet: offset 0 on each of Orders' queues on `broker`."""
    for q in range(4):
        await admin.commit_group_offset(addr, group, MessageQueue("Orders", broker, q), 0)


async def _writable_again(admin: Admin) -> None:
    route = await admin.instance.existing_route("Orders")
    assert route is not None and {q.broker_name: q.perm for q in route.data.queue_datas} == {"broker-a": 6}
    async with Producer("Shop", admin.instance.namesrvs[0]) as producer:
        assert (await producer.send(Message("Orders", b"after"))).message_queue.broker_name == "broker-a"


async def test_drain_that_times_out_is_undone(make_cluster, tmp_path):  # noqa: F811
    a, b, admin = await two_groups(make_cluster, tmp_path)
    await _stored_messages(admin, "Orders", 5)
    await _group_with_offsets(admin, a.broker_addr, "broker-a", "Idle")
    progress = Recorder()
    mover = TopicMover(admin, poll_interval=0.2, drain_timeout=1.0, progress=progress)
    with pytest.raises(MoveError, match="still lag 5 message"):
        await mover.execute(await mover.plan("Orders", ["broker-b"]))
    assert progress.states(StepKind.STOP_WRITES) == ["start", "done", "undo"]
    assert progress.states(StepKind.CREATE_TOPIC) == ["start", "done", "undo"]
    assert "Orders" not in (await admin.all_topic_config(b.broker_addr)).topic_config_table
    assert "Idle" not in (await admin.all_group_config(b.broker_addr)).subscription_group_table
    await _writable_again(admin)
    await admin.shutdown()


async def test_target_gone_during_the_move_is_undone(make_cluster, tmp_path):  # noqa: F811
    a, b, admin = await two_groups(make_cluster, tmp_path)
    await _stored_messages(admin, "Orders", 3)
    await _group_with_offsets(admin, a.broker_addr, "broker-a", "Idle")
    stopping: list[asyncio.Task] = []

    def stop_target_at_drain(event: MoveEvent) -> None:
        if event.step.kind is StepKind.DRAIN and event.state == "start":
            stopping.append(asyncio.get_running_loop().create_task(b.broker.stop()))

    mover = TopicMover(admin, poll_interval=0.2, drain_timeout=20, progress=stop_target_at_drain)
    with pytest.raises(MoveError, match="broker-b left during the drain") as failed:
        await mover.execute(await mover.plan("Orders", ["broker-b"]))
    await asyncio.gather(*stopping)
    assert StepKind.STOP_WRITES in {s.kind for s in failed.value.undone}
    await _writable_again(admin)
    await admin.shutdown()


async def test_a_producer_with_a_stale_route_does_not_bring_the_topic_back(make_cluster, tmp_path):  # noqa: F811
    """A producer that sent nothing during the move still holds the route from before it (broker-a
    only, refreshed every 30 s): its next send reaches broker-a, which must not auto-create the topic
    it just deleted, but refuse it so that the producer fetches the route again and goes to broker-b."""
    a, _, admin = await two_groups(make_cluster, tmp_path)
    async with Producer("Shop", a.namesrv_addr) as producer:
        assert (await producer.send(Message("Orders", b"before"))).message_queue.broker_name == "broker-a"
        mover = TopicMover(admin, poll_interval=0.2)
        await mover.execute(await mover.plan("Orders", ["broker-b"]))
        late = await producer.send(Message("Orders", b"late"))
    assert late.message_queue.broker_name == "broker-b"
    assert "Orders" not in (await admin.all_topic_config(a.broker_addr)).topic_config_table
    assert await _on(admin, "Orders", {"broker-b"})
    await admin.shutdown()


async def test_move_to_another_cluster_behind_other_nameservers(make_cluster, tmp_path, quick_clients):  # noqa: F811
    source = await make_cluster(broker_cluster_name="Old")
    target = await make_cluster(
        broker_cluster_name="New", broker_name="broker-x", store_path_root_dir=tmp_path / "x"
    )
    old, new = Admin(source.namesrv_addr), Admin(target.namesrv_addr)
    await old.create_topic("Orders", 4)
    await eventually(lambda: _on(old, "Orders", {"broker-a"}), "the route")
    await _stored_messages(old, "Orders", 10)
    consumed: list[str] = []
    consumer = PushConsumer("Billing", source.namesrv_addr, consume_from="first",
                            instance=client(source.namesrv_addr))  # fmt: skip
    consumer.subscribe("Orders", "*", lambda msgs: consumed.extend(m.body.decode() for m in msgs))
    await consumer.start()
    await eventually(lambda: _count(consumed, 10), "the source consumed")

    mover = TopicMover(old, new, poll_interval=0.2, drain_timeout=20)
    move = await mover.plan("Orders", (await new.masters("New")).keys())
    assert move.source == ("broker-a",) and move.target == ("broker-x",)
    await mover.execute(move)
    await consumer.shutdown()
    assert await old.instance.existing_route("Orders") is None
    assert await _on(new, "Orders", {"broker-x"})
    for q in range(4):  # committed by the move (no consumer of the group has seen the new cluster yet)
        ext = {"consumerGroup": "Billing", "topic": "Orders", "queueId": q, "setZeroIfNotFound": "false"}
        answer = await target.call(RequestCode.QUERY_CONSUMER_OFFSET, ext)
        assert answer.code == ResponseCode.SUCCESS and answer.ext_fields["offset"] == "0", answer.remark

    async with Producer("Shop", target.namesrv_addr) as producer:  # clients now use the new cluster
        await producer.send(Message("Orders", b"on the new cluster"))
    got: list[str] = []
    again = PushConsumer("Billing", target.namesrv_addr, instance=client(target.namesrv_addr))
    again.subscribe("Orders", "*", lambda msgs: got.extend(m.body.decode() for m in msgs))
    await again.start()
    await eventually(lambda: _count(got, 1), "the message on the new cluster")
    await again.shutdown()
    await old.shutdown()
    await new.shutdown()


async def _count(items: list[str], n: int) -> bool:
    return len(set(items)) >= n


async def test_bad_targets_are_refused_before_anything_changes(make_cluster, tmp_path):  # noqa: F811
    _, _, admin = await two_groups(make_cluster, tmp_path)
    mover = TopicMover(admin)
    with pytest.raises(MoveError, match="already on broker-a"):
        await mover.plan("Orders", ["broker-a"])
    with pytest.raises(MoveError, match="broker-z"):
        await mover.plan("Orders", ["broker-z"])
    with pytest.raises(MoveError, match="Nope does not exist"):
        await mover.plan("Nope", ["broker-b"])
    await admin.shutdown()
