"""Admin: topics, cluster layout and consumer progress, as RocketMQ's mqadmin shows them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import msgspec

from ferrymq.client.admin_consumers import ConsumerControl
from ferrymq.client.admin_messages import MessageLookups
from ferrymq.client.admin_quota import QuotaAdmin
from ferrymq.client.admin_stats import AdminStats
from ferrymq.client.dead_letters import list_dead_letters, resend_dead_letters
from ferrymq.client.instance import ClientError, ClientInstance, TLSOption
from ferrymq.client.message import MessageExt, MessageQueue, SendResult
from ferrymq.client.pull import query_offset, queue_offset
from ferrymq.net import RemotingError
from ferrymq.net.controllers import ControllerClient, parse_controller_addrs
from ferrymq.protocol.bodies import ClusterInfo, KVTable, TopicList, decode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.controller import (
    BrokerReplicasInfo,
    ElectMasterRequestHeader,
    MasterInfoHeader,
    ReplicasInfo,
)
from ferrymq.protocol.errors import ProtocolError
from ferrymq.protocol.remoting import RemotingCommand
from ferrymq.protocol.topic_names import AUTO_CREATE_TOPIC


@dataclass(frozen=True)
class QueueProgress:
    """One queue of a group's progress: how far the broker is, how far the group committed."""

    queue: MessageQueue
    broker_offset: int
    consumer_offset: int  # -1: the group never committed on this queue
    lag: int


@dataclass(frozen=True)
class ReplicaView:
    """One broker of a group: its id (the controller's id in controller mode), role and progress."""

    broker_id: int
    address: str
    role: str  # "master", "slave", or "gone" (known to the controllers, not alive)
    in_sync: bool | None  # in the SyncStateSet (None: no controller asked)
    max_offset: int | None  # CommitLog max offset (None: the broker did not answer)


@dataclass(frozen=True)
class BrokerGroupView:
    cluster: str
    broker_name: str
    master_id: int | None
    master_epoch: int | None  # controller mode only
    sync_state_set_epoch: int | None
    replicas: list[ReplicaView]


class Admin(ConsumerControl, MessageLookups, AdminStats, QuotaAdmin):
    def __init__(
        self, namesrv_addr: str, *, instance: ClientInstance | None = None, tls: TLSOption = False,
        access_key: str | None = None, secret_key: str | None = None,
    ) -> None:  # fmt: skip
        """``access_key``/``secret_key``: sign every request as this user (servers with auth on)."""
        self.instance = instance or ClientInstance(
            namesrv_addr, tls=tls, access_key=access_key, secret_key=secret_key
        )
        self._own_instance = instance is None

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.shutdown()

    async def shutdown(self) -> None:
        if self._own_instance:
            await self.instance.close()

    async def _ask_namesrv(self, code: int, ext: dict[str, str] | None = None) -> RemotingCommand:
        errors = []
        for addr in self.instance.namesrvs:
            try:
                response = await self.instance.invoke(addr, RemotingCommand(code, ext_fields=ext or {}))
            except RemotingError as e:
                errors.append(f"{addr}: {e}")
                continue
            if response.code == ResponseCode.SUCCESS:
                return response
            errors.append(f"{addr}: {response.remark}")
        raise ClientError(f"request {code} failed on every NameServer: " + "; ".join(errors))

    async def cluster_info(self) -> ClusterInfo:
        """Clusters, their brokers and each broker's addresses by id (0 = master)."""
        return decode_body(ClusterInfo, (await self._ask_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)).body)

    async def topics(self) -> list[str]:
        response = await self._ask_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        return sorted(decode_body(TopicList, response.body).topic_list)

    async def masters(self, cluster: str | None = None) -> dict[str, str]:
        """Broker name → master address, of `cluster` or of every cluster."""
        return await self._masters(cluster)

    async def _masters(self, cluster: str | None) -> dict[str, str]:
        info = await self.cluster_info()
        names = info.cluster_addr_table.get(cluster, []) if cluster else list(info.broker_addr_table)
        if cluster and not names:
            raise ClientError(f"cluster {cluster} has no broker")
        return {
            n: info.broker_addr_table[n].broker_addrs[0]
            for n in names
            if 0 in info.broker_addr_table[n].broker_addrs
        }

    async def create_topic(
        self,
        topic: str,
        queue_nums: int = 8,
        *,
        cluster: str | None = None,
        perm: int = 6,
        order: bool = False,
        brokers: Iterable[str] | None = None,
    ) -> None:
        """Create (or update) `topic` with `queue_nums` queues on every master of `cluster` (or all),
        or only on the masters of the broker groups named in `brokers` (a topic pinned to them)."""
        ext = {
            "topic": topic,
            "defaultTopic": AUTO_CREATE_TOPIC,
            "readQueueNums": str(queue_nums),
            "writeQueueNums": str(queue_nums),
            "perm": str(perm),
            "topicFilterType": "SINGLE_TAG",
            "order": str(order).lower(),
        }
        masters = await self._chosen_masters(cluster, brokers)
        if not masters:
            raise ClientError("no master broker to create the topic on")
        for name, addr in masters.items():
            response = await self.instance.invoke(
                addr, RemotingCommand(RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=ext)
            )
            if response.code != ResponseCode.SUCCESS:
                raise ClientError(f"broker {name} refused to create {topic}: {response.remark}")

    async def _chosen_masters(self, cluster: str | None, brokers: Iterable[str] | None) -> dict[str, str]:
        """The masters of `cluster` (or all), or of the broker groups in `brokers`, each named by its
        broker name or (as mqadmin's -b) its master's address; each must have a master."""
        masters = await self._masters(cluster)
        if brokers is None:
            return masters
        by_addr = {addr: name for name, addr in masters.items()}
        chosen, missing = {}, []
        for b in brokers:
            name = b if b in masters else by_addr.get(b)
            if name is None:
                missing.append(b)
            else:
                chosen[name] = masters[name]
        if missing:
            raise ClientError(f"no master registered for broker group(s) {', '.join(missing)}")
        return chosen

    async def masters_of(self, brokers: Iterable[str]) -> dict[str, str]:
        """Broker name -> master address of the broker groups named (by name or master address)."""
        return await self._chosen_masters(None, brokers)

    async def delete_topic(
        self, topic: str, *, cluster: str | None = None, brokers: Iterable[str] | None = None
    ) -> None:
        """Delete `topic` from every master of `cluster` (or all), then from every NameServer. With
        `brokers`, only from those groups' masters: their next registration drops them from the route."""
        for addr in (await self._chosen_masters(cluster, brokers)).values():
            await self.instance.invoke(
                addr, RemotingCommand(RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields={"topic": topic})
            )
        if brokers is not None:
            self.instance.routes.pop(topic, None)
            return
        for addr in self.instance.namesrvs:
            await self.instance.invoke(
                addr, RemotingCommand(RequestCode.DELETE_TOPIC_IN_NAMESRV, ext_fields={"topic": topic})
            )
        self.instance.routes.pop(topic, None)

    async def consumer_progress(self, group: str, topic: str) -> list[QueueProgress]:
        """Per queue: the broker's max offset, the group's committed offset and the lag between them."""
        route = await self.instance.existing_route(topic)
        if route is None:
            raise ClientError(f"topic {topic} does not exist")
        progress = []
        for mq in route.read_queues:
            addr = route.masters[mq.broker_name]
            broker_offset = await queue_offset(self.instance, addr, mq, RequestCode.GET_MAX_OFFSET)
            committed = await query_offset(self.instance, addr, mq, group)
            consumer_offset = -1 if committed is None else committed
            progress.append(
                QueueProgress(mq, broker_offset, consumer_offset, broker_offset - max(consumer_offset, 0))
            )
        return progress

    async def dead_letters(self, group: str, limit: int = 1000) -> list[MessageExt]:
        """Up to `limit` of `group`'s dead letters (%DLQ%<group>), oldest first."""
        return await list_dead_letters(self.instance, group, limit)

    async def resend_dead_letters(
        self, group: str, msg_ids: Iterable[str] | None = None, limit: int = 1000
    ) -> list[tuple[MessageExt, SendResult]]:
        """Send `group`'s dead letters (the given ids, or all up to `limit`) back to their topics."""
        return await resend_dead_letters(self.instance, group, msg_ids, limit)

    async def broker_groups(self, controllers: str | None = None) -> list[BrokerGroupView]:
        """Every broker group: replicas, roles, offsets; with `controllers` also epochs and SyncStateSets."""
        info = await self.cluster_info()
        cluster_of = {name: data.cluster or "" for name, data in info.broker_addr_table.items()}
        controlled: dict[str, ReplicasInfo] = {}
        if controllers:
            response = await self._ask_controllers(
                controllers,
                RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
                body=msgspec.json.encode(sorted(cluster_of)),
            )
            controlled = decode_body(BrokerReplicasInfo, response.body).replicas_info_table
        groups = []
        master_id: int | None
        master_epoch: int | None
        sync_epoch: int | None
        for name in sorted(set(cluster_of) | set(controlled)):
            known = controlled.get(name)
            if known is not None:
                master_id, master_epoch, sync_epoch = (
                    known.master_broker_id,
                    known.master_epoch,
                    known.sync_state_set_epoch,
                )
                replicas = _controlled_replicas(known)
            else:
                addrs = info.broker_addr_table[name].broker_addrs
                master_id, master_epoch, sync_epoch = (0 if 0 in addrs else None), None, None
                replicas = [(i, a, "master" if i == 0 else "slave", None) for i, a in addrs.items()]
            views = [
                ReplicaView(
                    i, address, role, in_sync, None if role == "gone" else await self._max_offset(address)
                )
                for i, address, role, in_sync in sorted(replicas)
            ]
            groups.append(
                BrokerGroupView(cluster_of.get(name, ""), name, master_id, master_epoch, sync_epoch, views)
            )
        return groups

    async def elect_master(
        self, controllers: str, broker_name: str, broker_id: int, cluster: str = ""
    ) -> MasterInfoHeader:
        """Make `broker_id` the master of `broker_name` now (it must be alive and in the SyncStateSet)."""
        header = ElectMasterRequestHeader(cluster, broker_name, broker_id, designate_elect=True)
        response = await self._ask_controllers(
            controllers, RequestCode.CONTROLLER_ELECT_MASTER, header.to_ext_fields()
        )
        return MasterInfoHeader.from_ext_fields(response.ext_fields)

    async def _ask_controllers(self, controllers: str, code: int, ext: dict[str, str] | None = None,
                               body: bytes = b"") -> RemotingCommand:  # fmt: skip
        client = ControllerClient(parse_controller_addrs(controllers), self.instance.remoting)
        try:
            response = await client.invoke(code, ext, body)
        except RemotingError as e:
            raise ClientError(str(e)) from None
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"the controller refused: {response.remark} (code {response.code})")
        return response

    async def _max_offset(self, address: str) -> int | None:
        try:
            response = await self.instance.invoke(
                address, RemotingCommand(RequestCode.GET_BROKER_RUNTIME_INFO)
            )
            return int(decode_body(KVTable, response.body).table["commitLogMaxOffset"])
        except (RemotingError, KeyError, ValueError, ProtocolError):
            return None


def _controlled_replicas(known: ReplicasInfo) -> list[tuple[int, str, str, bool | None]]:
    """(id, address, role, in sync) of each replica the controllers know."""
    replicas: list[tuple[int, str, str, bool | None]] = []
    for in_sync, members in ((True, known.in_sync_replicas), (False, known.not_in_sync_replicas)):
        for r in members:
            role = "master" if r.broker_id == known.master_broker_id else "slave"
            replicas.append((r.broker_id, r.broker_address, role if r.alive else "gone", in_sync))
    return replicas
