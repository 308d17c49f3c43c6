"""Moving a topic and its consumer groups to other broker groups (of one cluster) or to another
cluster while producers and consumers keep running, with no message lost.

The steps are RocketMQ's (rocketmq-operator's TopicTransfer): create the groups and the topic on the
target, stop writes on the source (the topic read-only there, so producers go to the target),
wait until every group's lag on the source is 0, then delete the topic and the groups there and
create the groups' retry topics on the target. ferrymq adds one step: each group's offsets on the
new queues start at 0, so a consumer that sees the new queues late (or consumes from the last
offset) still reads every message written there.

`plan` is pure (what to do, given what `observe` read); `TopicMover.execute` runs the steps,
reports progress, and on a failure or a drain that does not finish undoes what it did: the source
writable again, what it created on the target deleted. Once the source is drained the target
serves the topic alone: a later failure is reported, not undone. The Kubernetes operator's
TopicTransfer and `ferrymq admin move-topic`/`pin-topic`/`rebalance` all run this."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from ferrymq.client.admin import Admin
from ferrymq.client.admin_stats import AdminRefused
from ferrymq.client.instance import ClientError
from ferrymq.client.message import MessageQueue
from ferrymq.protocol.bodies import SubscriptionGroupConfig, TopicConfig

PERM_READ, PERM_WRITE = 4, 2
RETRY_PREFIX = "%RETRY%"


class StepKind(Enum):
    CREATE_GROUPS = "create the consumer groups on the target"
    CREATE_TOPIC = "create the topic on the target"
    START_OFFSETS = "start the groups at offset 0 on the new queues"
    STOP_WRITES = "stop writes on the source (topic read-only)"
    DRAIN = "wait until every group's lag on the source is 0"
    DELETE_TOPIC = "delete the topic on the source"
    DELETE_GROUPS = "delete the groups on the source"
    CREATE_RETRY = "create the groups' retry topics on the target"


TARGET_SIDE = {StepKind.CREATE_GROUPS, StepKind.CREATE_TOPIC, StepKind.START_OFFSETS, StepKind.CREATE_RETRY}


@dataclass(frozen=True)
class Step:
    kind: StepKind
    brokers: tuple[str, ...]  # broker groups it acts on (of the target or the source side)
    groups: tuple[str, ...] = ()

    def describe(self) -> str:
        side = "target" if self.kind in TARGET_SIDE else "source"
        groups = f"; groups {', '.join(self.groups)}" if self.groups else ""
        return f"{self.kind.value} [{side}: {', '.join(self.brokers)}{groups}]"


@dataclass(frozen=True)
class Observed:
    """What the planner needs, read from the clusters by `TopicMover.observe`."""

    configs: dict[str, TopicConfig]  # broker group holding the topic now -> its config there
    groups: dict[str, SubscriptionGroupConfig]  # groups consuming the topic
    target_groups: frozenset[str] = frozenset()  # of those, the ones the target brokers already have
    shared_groups: frozenset[str] = frozenset()  # of those, the ones consuming other topics on the source
    same_cluster: bool = True  # source and target behind the same NameServers


@dataclass(frozen=True)
class Plan:
    topic: str
    source: tuple[str, ...]  # broker groups the topic leaves
    target: tuple[str, ...]  # broker groups the topic arrives on
    steps: tuple[Step, ...]
    observed: Observed

    def describe(self) -> list[str]:
        return [f"{i}. {s.describe()}" for i, s in enumerate(self.steps, 1)]


class MoveError(ClientError):
    """A move that cannot be planned (bad target) or failed; `undone`: the steps rolled back."""

    def __init__(self, message: str, step: Step | None = None, undone: Iterable[Step] = ()) -> None:
        super().__init__(message)
        self.step = step
        self.undone = tuple(undone)


def plan(topic: str, target: Iterable[str], observed: Observed) -> Plan:
    """The steps moving `topic` from where it is (`observed.configs`) onto the broker groups in
    `target`. Within one cluster, groups both in the source and the target are left alone."""
    wanted = tuple(dict.fromkeys(target))
    if not wanted:
        raise MoveError("no target broker group")
    if not observed.configs:
        raise MoveError(f"topic {topic} is on no broker group")
    holders = tuple(sorted(observed.configs))
    if observed.same_cluster:
        leaving = tuple(b for b in holders if b not in wanted)
        arriving = tuple(b for b in wanted if b not in observed.configs)
    else:
        leaving, arriving = holders, wanted
    if not leaving and not arriving:
        raise MoveError(f"topic {topic} is already on {', '.join(wanted)}")
    groups = tuple(sorted(observed.groups))
    new_groups = tuple(g for g in groups if g not in observed.target_groups)
    deletable = tuple(g for g in groups if g not in observed.shared_groups)
    steps: list[Step] = []
    if arriving:
        if new_groups:
            steps.append(Step(StepKind.CREATE_GROUPS, arriving, new_groups))
        steps.append(Step(StepKind.CREATE_TOPIC, arriving))
        if groups:
            steps.append(Step(StepKind.START_OFFSETS, arriving, groups))
    if leaving:
        steps.append(Step(StepKind.STOP_WRITES, leaving))
        steps.append(Step(StepKind.DRAIN, leaving, groups))
        steps.append(Step(StepKind.DELETE_TOPIC, leaving))
        if deletable:
            steps.append(Step(StepKind.DELETE_GROUPS, leaving, deletable))
    if arriving and groups:
        steps.append(Step(StepKind.CREATE_RETRY, arriving, groups))
    return Plan(topic, leaving, arriving, tuple(steps), observed)


@dataclass(frozen=True)
class MoveEvent:
    """Progress: a step started, finished, or was undone; during the drain, the lag left."""

    step: Step
    state: str  # "start", "done", "lag", "undo", "failed"
    lag: int | None = None
    detail: str = ""


Progress = Callable[[MoveEvent], None]


@dataclass
class TopicMover:
    """Runs moves from the cluster behind `source` to the one behind `target` (the same when None)."""

    source: Admin
    target: Admin | None = None
    drain_timeout: float = 300.0
    poll_interval: float = 2.0
    route_timeout: float = 30.0  # for brokers to tell the NameServers of a change
    progress: Progress = field(default=lambda event: None)

    @property
    def _target(self) -> Admin:
        return self.target or self.source

    async def observe(self, topic: str, target: Iterable[str]) -> Observed:
        """Read where `topic` is, its groups, and which of them the target already has."""
        route = await self.source.instance.existing_route(topic)
        if route is None:
            raise MoveError(f"topic {topic} does not exist")
        configs: dict[str, TopicConfig] = {}
        for name, addr in sorted(route.masters.items()):
            topic_table = (await self.source.all_topic_config(addr)).topic_config_table
            if topic in topic_table:
                configs[name] = topic_table[topic]
        same = self.target is None or self.target is self.source
        wanted = list(target)
        target_masters = await self._target.masters()
        if missing := [b for b in wanted if b not in target_masters]:
            raise MoveError(f"no master registered for target broker group(s) {', '.join(missing)}")
        leaving = [b for b in configs if not same or b not in wanted]
        names = [g for g in await self.source.topic_consumed_by(topic) if not g.startswith("%")]
        groups: dict[str, SubscriptionGroupConfig] = {}
        shared: set[str] = set()
        on_target: set[str] = set()
        for name in configs:
            table = (await self.source.all_group_config(route.masters[name])).subscription_group_table
            groups.update({g: table.get(g, SubscriptionGroupConfig(g)) for g in names if g not in groups})
        for b in wanted:
            table = (await self._target.all_group_config(target_masters[b])).subscription_group_table
            on_target.update(g for g in names if g in table)
        for g in names:
            if leaving and _other_topics(await self._stats_topics(g, leaving), topic):
                shared.add(g)
        return Observed(configs, groups, frozenset(on_target), frozenset(shared), same)

    async def _stats_topics(self, group: str, brokers: list[str]) -> set[str]:
        try:
            stats = await self.source.consume_stats(group, brokers=brokers)
        except AdminRefused:
            return set()
        return {mq.topic for mq in stats.offsets}

    async def plan(self, topic: str, target: Iterable[str]) -> Plan:
        wanted = list(target)
        return plan(topic, wanted, await self.observe(topic, wanted))

    async def execute(self, move: Plan) -> None:
        """Run the steps; on failure undo the done ones (newest first) and raise MoveError."""
        undo: list[tuple[Step, Callable[[], Awaitable[None]]]] = []
        for step in move.steps:
            self.progress(MoveEvent(step, "start"))
            try:
                undo_step = await self._run(move, step)
            except (ClientError, OSError, TimeoutError) as e:
                self.progress(MoveEvent(step, "failed", detail=str(e)))
                if step.kind in (StepKind.DELETE_TOPIC, StepKind.DELETE_GROUPS, StepKind.CREATE_RETRY):
                    raise MoveError(
                        f"{step.describe()} failed after the source was drained (the target serves "
                        f"{move.topic}; finish this step by hand): {e}",
                        step,
                    ) from e
                undone = await self._undo(undo)
                raise MoveError(f"{step.describe()} failed, undone: {e}", step, undone) from e
            if undo_step is not None:
                undo.append((step, undo_step))
            self.progress(MoveEvent(step, "done"))

    async def _undo(self, done: list[tuple[Step, Callable[[], Awaitable[None]]]]) -> list[Step]:
        undone = []
        for step, action in reversed(done):
            self.progress(MoveEvent(step, "undo"))
            try:
                await action()
            except (ClientError, OSError, TimeoutError) as e:  # keep undoing the others
                self.progress(MoveEvent(step, "failed", detail=f"undo: {e}"))
                continue
            undone.append(step)
        return undone

    async def _run(self, move: Plan, step: Step) -> Callable[[], Awaitable[None]] | None:
        """Do one step; return what undoes it (None: nothing to undo)."""
        topic, observed, brokers = move.topic, move.observed, list(step.brokers)
        source, target = self.source, self._target
        if step.kind is StepKind.CREATE_GROUPS:
            await target.create_groups([observed.groups[g] for g in step.groups], brokers=brokers)

            async def delete_groups() -> None:
                addrs = list((await target.masters_of(brokers)).values())
                for g in step.groups:
                    await target.delete_group(g, addrs, clean_offset=True)

            return delete_groups
        if step.kind is StepKind.CREATE_TOPIC:
            model = next(iter(observed.configs.values()))
            await target.create_topic(topic, model.write_queue_nums, perm=PERM_READ | PERM_WRITE,
                                      order=model.order, brokers=brokers)  # fmt: skip

            async def delete_topic() -> None:
                await target.delete_topic(topic, brokers=brokers)
                await self._await_route(target, topic, lambda q: not set(brokers) & set(q), "gone")

            await self._await_route(target, topic, lambda q: all(q.get(b, 0) & PERM_WRITE for b in brokers),
                                    "writable on the target")  # fmt: skip
            return delete_topic
        if step.kind is StepKind.START_OFFSETS:
            model = next(iter(observed.configs.values()))
            for name, addr in (await target.masters_of(brokers)).items():
                for queue_id in range(model.read_queue_nums):
                    for g in step.groups:
                        await target.commit_group_offset(addr, g, MessageQueue(topic, name, queue_id), 0)
            return None
        if step.kind is StepKind.STOP_WRITES:
            await self._set_perm(move, brokers, read_only=True)

            async def restore() -> None:
                await self._set_perm(move, brokers, read_only=False)

            return restore
        if step.kind is StepKind.DRAIN:
            await self._drain(move, step)
            return None
        if step.kind is StepKind.DELETE_TOPIC:
            if observed.same_cluster:  # the registrations of the brokers it left drop them from the route
                await source.delete_topic(topic, brokers=brokers)
            else:  # it left every broker behind these NameServers: their routes go too (RocketMQ's do not
                await source.delete_topic(topic)  # drop topics on registration by default)
            await self._await_route(source, topic, lambda q: not set(brokers) & set(q), "off the source")
            return None
        if step.kind is StepKind.DELETE_GROUPS:
            addrs = list((await source.masters_of(brokers)).values())
            for g in step.groups:
                await source.delete_group(g, addrs, clean_offset=True)
            return None
        retry = [observed.groups[g] for g in step.groups]
        for config in retry:
            await target.create_topic(RETRY_PREFIX + config.group_name, config.retry_queue_nums,
                                      brokers=brokers)  # fmt: skip
        return None

    async def _set_perm(self, move: Plan, brokers: list[str], *, read_only: bool) -> None:
        for b in brokers:
            config = move.observed.configs[b]
            perm = config.perm & ~PERM_WRITE if read_only else config.perm
            await self.source.create_topic(move.topic, config.write_queue_nums, perm=perm,
                                           order=config.order, brokers=[b])  # fmt: skip

        def settled(queues: dict[str, int]) -> bool:
            return all(b in queues and bool(queues[b] & PERM_WRITE) != read_only for b in brokers)

        await self._await_route(self.source, move.topic, settled, "read-only" if read_only else "writable")

    async def _drain(self, move: Plan, step: Step) -> None:
        deadline = time.monotonic() + self.drain_timeout
        while True:
            await self._check_target(move)
            lag = sum([await self._lag(move.topic, g, list(step.brokers)) for g in step.groups])
            self.progress(MoveEvent(step, "lag", lag=lag))
            if lag == 0:
                return
            if time.monotonic() + self.poll_interval > deadline:
                raise MoveError(
                    f"the groups still lag {lag} message(s) on the source after {self.drain_timeout:g} s"
                )
            await asyncio.sleep(self.poll_interval)

    async def _check_target(self, move: Plan) -> None:
        """The source takes no writes now: if a target broker group left, producers have nowhere to
        write, so the move must be undone rather than waited out."""
        if not move.target:
            return
        route = await self._target.instance.existing_route(move.topic)
        writable = set()
        if route is not None:
            writable = {q.broker_name for q in route.data.queue_datas if q.perm & PERM_WRITE} & set(
                route.masters
            )
        if gone := [b for b in move.target if b not in writable]:
            raise MoveError(f"target broker group(s) {', '.join(gone)} left during the drain")

    async def _lag(self, topic: str, group: str, brokers: list[str]) -> int:
        """Messages of `topic` on `brokers` that `group` has not consumed (committed) yet."""
        try:
            stats = await self.source.consume_stats(group, topic, brokers=brokers)
        except AdminRefused:  # the group has no offset there: all that is stored is its lag
            masters = await self.source.masters_of(brokers)
            stored = await self.source.topic_stats(topic)
            return sum(o.max_offset - o.min_offset for q, o in stored.items() if q.broker_name in masters)
        return stats.diff

    async def _await_route(
        self, admin: Admin, topic: str, settled: Callable[[dict[str, int]], bool], what: str
    ) -> None:
        """Wait until the NameServers' route of `topic` (broker name -> perm) is `settled`."""
        deadline = time.monotonic() + self.route_timeout
        while True:
            route = await admin.instance.existing_route(topic)
            queues = {q.broker_name: q.perm for q in route.data.queue_datas} if route else {}
            if settled(queues):
                return
            if time.monotonic() > deadline:
                raise MoveError(f"the route of {topic} is not {what} after {self.route_timeout:g} s")
            await asyncio.sleep(min(0.2, self.poll_interval))


def _other_topics(topics: set[str], topic: str) -> bool:
    return any(t != topic and not t.startswith(RETRY_PREFIX) for t in topics)
