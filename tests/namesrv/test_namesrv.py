"""The NameServer on a real port, driven by fake brokers and clients sending real remoting frames."""

import asyncio
import json
import re
import signal
import struct
import subprocess
import sys
import zlib

import pytest

from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.route_table import RouteTable
from ferrymq.namesrv.server import NameServer
from ferrymq.net import RemotingClient
from ferrymq.protocol.bodies import (
    ClusterInfo,
    DataVersion,
    KVTable,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
    decode_body,
    encode_body,
)
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import RegisterBrokerRequestHeader
from ferrymq.protocol.remoting import RemotingCommand


class FakeBroker:
    """A broker as a NameServer sees one: its own connection, its REGISTER_BROKER frames."""

    def __init__(self, name="broker-a", addr="10.0.0.1:10911", *, cluster="DefaultCluster", broker_id=0):
        self.name, self.addr, self.cluster, self.broker_id = name, addr, cluster, broker_id
        self.client = RemotingClient()

    def registration(self, topics, *, version=1, perm=6, **header_fields):
        table = {
            t: TopicConfig(topic_name=t, read_queue_nums=q, write_queue_nums=q, perm=perm)
            for t, q in topics.items()
        }
        wrapper = TopicConfigSerializeWrapper(
            topic_config_table=table, data_version=DataVersion(counter=version)
        )
        body = encode_body(RegisterBrokerBody(topic_config_serialize_wrapper=wrapper))
        header = RegisterBrokerRequestHeader(
            broker_name=self.name,
            broker_addr=self.addr,
            cluster_name=self.cluster,
            broker_id=self.broker_id,
            ha_server_addr=self.addr.replace(":10911", ":10912"),
            body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
            **header_fields,
        )
        return RemotingCommand(RequestCode.REGISTER_BROKER, ext_fields=header.to_ext_fields(), body=body)

    async def register(self, namesrv, topics=None, **kwargs):
        request = self.registration({"T": 4} if topics is None else topics, **kwargs)
        answer = await self.client.invoke(address(namesrv), request)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        return answer

    async def call(self, namesrv, code, **ext_fields):
        identity = {"brokerName": self.name, "brokerAddr": self.addr, "clusterName": self.cluster}
        request = RemotingCommand(
            code, ext_fields={**identity, "brokerId": str(self.broker_id), **ext_fields}
        )
        return await self.client.invoke(address(namesrv), request)

    async def close(self):
        await self.client.close()


def address(namesrv):
    return f"127.0.0.1:{namesrv.port}"


@pytest.fixture
async def namesrv():
    server = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
    await server.start()
    yield server
    await server.stop(grace=1)


@pytest.fixture
async def brokers():
    made = []

    def make(*args, **kwargs):
        made.append(FakeBroker(*args, **kwargs))
        return made[-1]

    yield make
    for broker in made:
        await broker.close()


async def call(client, namesrv, code, body=b"", **ext_fields):
    return await client.invoke(address(namesrv), RemotingCommand(code, ext_fields=ext_fields, body=body))


async def route(client, namesrv, topic):
    answer = await call(client, namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic)
    return decode_body(TopicRouteData, answer.body) if answer.code == ResponseCode.SUCCESS else answer


async def no_route(client, namesrv, topic):
    answer = await call(client, namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic)
    return answer.code == ResponseCode.TOPIC_NOT_EXIST


async def eventually(check, timeout=5.0):
    """Wait until ``await check()`` is true, for at most ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.02)


# --- routes -----------------------------------------------------------------------------------------


async def test_a_master_registration_makes_a_route_in_standard_json(namesrv, client, brokers):
    broker = brokers()
    answer = await broker.register(namesrv, {"T": 4, "TBW102": 8})
    assert decode_body(KVTable, answer.body) == KVTable()

    answer = await call(client, namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="T")
    assert answer.code == ResponseCode.SUCCESS
    raw = json.loads(bytes(answer.body))  # standard JSON: quoted broker-id keys
    assert raw["brokerDatas"] == [
        {
            "brokerName": "broker-a",
            "cluster": "DefaultCluster",
            "brokerAddrs": {"0": "10.0.0.1:10911"},
            "enableActingMaster": False,
            "zoneName": None,
        }
    ]
    assert raw["queueDatas"] == [
        {"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}
    ]
    assert (await route(client, namesrv, "TBW102")).queue_datas[0].write_queue_nums == 8


async def test_a_route_lists_every_broker_that_has_the_topic(namesrv, client, brokers):
    await brokers("broker-a", "10.0.0.1:10911").register(namesrv, {"T": 4})
    await brokers("broker-b", "10.0.0.2:10911").register(namesrv, {"T": 2, "U": 1})
    both = await route(client, namesrv, "T")
    assert [(q.broker_name, q.write_queue_nums) for q in both.queue_datas] == [
        ("broker-a", 4),
        ("broker-b", 2),
    ]
    assert [b.broker_addrs for b in both.broker_datas] == [{0: "10.0.0.1:10911"}, {0: "10.0.0.2:10911"}]
    only_b = await route(client, namesrv, "U")
    assert [b.broker_name for b in only_b.broker_datas] == ["broker-b"]


async def test_an_unknown_topic_is_topic_not_exist(namesrv, client, brokers):
    await brokers().register(namesrv)
    answer = await route(client, namesrv, "Nope")
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    assert "Nope" in answer.remark


async def test_a_route_request_as_the_cpp_client_sends_it(namesrv, brokers):
    """rocketmq 0.4.4: language CPP, version 63, ACL fields, and numbers where strings belong."""
    await brokers().register(namesrv, {"TBW102": 8})
    header = (
        b'{"code":105,"language":"CPP","version":63,"opaque":7,"flag":0,'
        b'"extFields":{"topic":"TBW102","AccessKey":"","Signature":"","OnsChannel":"ALIYUN","queueId":0}}'
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", namesrv.port)
    try:
        writer.write(struct.pack(">iI", 4 + len(header), len(header)) + header)
        async with asyncio.timeout(5):
            size = int.from_bytes(await reader.readexactly(4), "big")
            frame = await reader.readexactly(size)
    finally:
        writer.close()
    header_size = int.from_bytes(frame[:4], "big")  # serialize type 0 (JSON) in the high byte
    answer = json.loads(frame[4 : 4 + header_size])
    assert (answer["code"], answer["opaque"], answer["flag"]) == (0, 7, 1)
    body = json.loads(frame[4 + header_size :])
    assert body["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911"}


async def test_a_registration_body_exactly_as_a_java_broker_sends_it(namesrv, client):
    body = (
        b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,"stateVersion":0,'
        b'"timestamp":1700000000000},"mappingDataVersion":{"counter":0,"stateVersion":0,"timestamp":1700000000000},'
        b'"topicConfigTable":{"TopicTest":{"attributes":{},"order":false,"perm":6,"readQueueNums":4,'
        b'"topicFilterType":"SINGLE_TAG","topicName":"TopicTest","topicSysFlag":0,"writeQueueNums":4}},'
        b'"topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{}}}'
    )
    ext_fields = {
        "brokerName": "broker-j",
        "brokerAddr": "10.0.0.9:10911",
        "clusterName": "DefaultCluster",
        "haServerAddr": "10.0.0.9:10912",
        "brokerId": "0",
        "compressed": "false",
        "enableActingMaster": "false",
        "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF),
    }
    answer = await call(client, namesrv, RequestCode.REGISTER_BROKER, body=body, **ext_fields)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert (await route(client, namesrv, "TopicTest")).broker_datas[0].broker_name == "broker-j"


async def test_cluster_info_and_topic_lists(namesrv, client, brokers):
    await brokers("broker-a", "10.0.0.1:10911", cluster="C1").register(namesrv, {"T": 4, "A": 1})
    await brokers("broker-b", "10.0.0.2:10911", cluster="C1").register(namesrv, {"T": 4})
    await brokers("broker-c", "10.0.0.3:10911", cluster="C2").register(namesrv, {"C": 1})

    info = decode_body(ClusterInfo, (await call(client, namesrv, RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    assert info.cluster_addr_table == {"C1": ["broker-a", "broker-b"], "C2": ["broker-c"]}
    assert info.broker_addr_table["broker-c"].broker_addrs == {0: "10.0.0.3:10911"}
    assert info.broker_addr_table["broker-a"].cluster == "C1"

    everything = await call(client, namesrv, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert decode_body(TopicList, everything.body).topic_list == ["A", "C", "T"]
    in_c1 = await call(client, namesrv, RequestCode.GET_TOPICS_BY_CLUSTER, cluster="C1")
    assert decode_body(TopicList, in_c1.body).topic_list == ["A", "T"]


async def test_delete_topic_everywhere_or_in_one_cluster(namesrv, client, brokers):
    await brokers("broker-a", "10.0.0.1:10911", cluster="C1").register(namesrv, {"T": 4, "U": 4})
    await brokers("broker-b", "10.0.0.2:10911", cluster="C2").register(namesrv, {"T": 4, "U": 4})

    answer = await call(client, namesrv, RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="T")
    assert answer.code == ResponseCode.SUCCESS
    assert (await route(client, namesrv, "T")).code == ResponseCode.TOPIC_NOT_EXIST
    topics = await call(client, namesrv, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert decode_body(TopicList, topics.body).topic_list == ["U"]

    await call(client, namesrv, RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="U", clusterName="C1")
    assert [b.broker_name for b in (await route(client, namesrv, "U")).broker_datas] == ["broker-b"]


# --- brokers coming and going -------------------------------------------------------------------


async def test_unregister_removes_the_broker_and_its_routes(namesrv, client, brokers):
    broker = brokers()
    await broker.register(namesrv)
    answer = await broker.call(namesrv, RequestCode.UNREGISTER_BROKER)
    assert answer.code == ResponseCode.SUCCESS
    assert (await route(client, namesrv, "T")).code == ResponseCode.TOPIC_NOT_EXIST
    info = decode_body(ClusterInfo, (await call(client, namesrv, RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    assert info == ClusterInfo()


async def test_a_broker_whose_connection_closes_is_dropped_at_once(namesrv, client, brokers):
    leaving, staying = brokers("broker-a", "10.0.0.1:10911"), brokers("broker-b", "10.0.0.2:10911")
    await leaving.register(namesrv)
    await staying.register(namesrv)
    await leaving.close()

    async def only_b_left():
        return [b.broker_name for b in (await route(client, namesrv, "T")).broker_datas] == ["broker-b"]

    await eventually(only_b_left)


async def test_a_silent_broker_expires_and_a_registering_one_stays(client, brokers):
    config = NamesrvConfig(
        listen_host="127.0.0.1",
        listen_port=0,
        broker_channel_expired_time=300,
        scan_not_active_broker_interval=50,
    )
    namesrv = NameServer(config)
    await namesrv.start()
    silent, chatty = brokers("broker-a", "10.0.0.1:10911"), brokers("broker-b", "10.0.0.2:10911")
    try:
        await silent.register(namesrv)
        await chatty.register(namesrv)
        silent_connection = await silent.client.connection(address(namesrv))

        async def keep_registering():
            for _ in range(15):  # 0.9 s, three expiry periods
                await chatty.register(namesrv)
                await asyncio.sleep(0.06)

        await asyncio.gather(keep_registering(), asyncio.wait_for(silent_connection.wait_closed(), 5))
        assert [b.broker_name for b in (await route(client, namesrv, "T")).broker_datas] == ["broker-b"]
    finally:
        await namesrv.stop()


async def test_heartbeats_keep_a_registration_alive_and_a_broker_timeout_is_honoured(client, brokers):
    config = NamesrvConfig(listen_host="127.0.0.1", listen_port=0, scan_not_active_broker_interval=50)
    namesrv = NameServer(config)  # default expiry: 120 s
    await namesrv.start()
    beating = brokers("broker-a", "10.0.0.1:10911")
    quick = brokers("broker-b", "10.0.0.2:10911")
    try:
        await beating.register(namesrv, heartbeat_timeout_millis=300)
        await quick.register(namesrv, {"Q": 1}, heartbeat_timeout_millis=300)

        async def keep_beating():
            for _ in range(15):
                assert (
                    await beating.call(namesrv, RequestCode.BROKER_HEARTBEAT)
                ).code == ResponseCode.SUCCESS
                await asyncio.sleep(0.06)

        await asyncio.gather(keep_beating(), eventually(lambda: no_route(client, namesrv, "Q")))
        assert [b.broker_name for b in (await route(client, namesrv, "T")).broker_datas] == ["broker-a"]
    finally:
        await namesrv.stop()


def test_expiry_follows_the_clock():
    now = [1000.0]
    table = RouteTable(broker_timeout=120.0, clock=lambda: now[0])
    header = RegisterBrokerRequestHeader(
        broker_name="broker-a", broker_addr="a:1", cluster_name="C", broker_id=0, ha_server_addr="a:2"
    )
    wrapper = TopicConfigSerializeWrapper(topic_config_table={"T": TopicConfig(topic_name="T")})
    table.register_broker(header, wrapper, channel="conn")
    now[0] += 120.0
    assert table.remove_expired() == []
    now[0] += 0.001
    assert table.remove_expired() == [(("C", "a:1"), "conn")]
    assert table.topic_route("T") is None
    assert table.cluster_info() == ClusterInfo()


async def test_query_data_version_tells_a_broker_whether_to_register_again(namesrv, brokers):
    broker = brokers()
    unknown = await broker.call(namesrv, RequestCode.QUERY_DATA_VERSION)
    assert unknown.ext_fields["changed"] == "true"
    await broker.register(namesrv, version=5)
    same = RemotingCommand(
        RequestCode.QUERY_DATA_VERSION,
        ext_fields={
            "brokerName": "broker-a",
            "brokerAddr": "10.0.0.1:10911",
            "clusterName": "DefaultCluster",
            "brokerId": "0",
        },
        body=encode_body(DataVersion(counter=5)),
    )
    answer = await broker.client.invoke(address(namesrv), same)
    assert answer.ext_fields["changed"] == "false"
    assert decode_body(DataVersion, answer.body).counter == 5


# --- master and slave ----------------------------------------------------------------------------


async def test_a_slave_learns_its_master_and_joins_the_route(namesrv, client, brokers):
    master = brokers("broker-a", "10.0.0.1:10911", broker_id=0)
    slave = brokers("broker-a", "10.0.0.2:10911", broker_id=1)
    early = await slave.register(namesrv, {})
    assert "masterAddr" not in early.ext_fields  # no master yet

    await master.register(namesrv, {"T": 4})
    answer = await slave.register(namesrv, {"T": 4})
    assert answer.ext_fields["masterAddr"] == "10.0.0.1:10911"
    assert answer.ext_fields["haServerAddr"] == "10.0.0.1:10912"
    assert (await route(client, namesrv, "T")).broker_datas[0].broker_addrs == {
        0: "10.0.0.1:10911",
        1: "10.0.0.2:10911",
    }

    await master.call(namesrv, RequestCode.UNREGISTER_BROKER)
    left = await route(client, namesrv, "T")  # the slave still serves reads
    assert left.broker_datas[0].broker_addrs == {1: "10.0.0.2:10911"}
    assert left.queue_datas[0].broker_name == "broker-a"


async def test_a_promoted_slave_leaves_its_old_id(namesrv, client, brokers):
    await brokers("broker-a", "10.0.0.2:10911", broker_id=1).register(namesrv, {"T": 4})
    await brokers("broker-a", "10.0.0.2:10911", broker_id=0).register(namesrv, {"T": 4})
    assert (await route(client, namesrv, "T")).broker_datas[0].broker_addrs == {0: "10.0.0.2:10911"}


# --- permissions ------------------------------------------------------------------------------


async def test_write_permission_follows_registrations_and_admin_wipes(namesrv, client, brokers):
    broker = brokers()
    await broker.register(namesrv, {"T": 4, "U": 4}, version=1)

    await broker.register(
        namesrv, {"T": 4, "U": 4}, version=2, perm=4
    )  # the broker made its topics read-only
    assert (await route(client, namesrv, "T")).queue_datas[0].perm == 4
    await broker.register(namesrv, {"T": 4, "U": 4}, version=3, perm=6)
    assert (await route(client, namesrv, "T")).queue_datas[0].perm == 6

    wiped = await call(client, namesrv, RequestCode.WIPE_WRITE_PERM_OF_BROKER, brokerName="broker-a")
    assert wiped.ext_fields == {"wipeTopicCount": "2"}
    assert (await route(client, namesrv, "T")).queue_datas[0].perm == 4
    await broker.register(namesrv, {"T": 4, "U": 4}, version=3, perm=6)  # unchanged: the wipe holds
    assert (await route(client, namesrv, "T")).queue_datas[0].perm == 4

    added = await call(client, namesrv, RequestCode.ADD_WRITE_PERM_OF_BROKER, brokerName="broker-a")
    assert added.ext_fields == {"addTopicCount": "2"}
    assert (await route(client, namesrv, "U")).queue_datas[0].perm == 6


# --- KV config -------------------------------------------------------------------------------


async def test_kv_config_put_get_list_delete(namesrv, client):
    ns = "ORDER_TOPIC_CONFIG"
    missing = await call(client, namesrv, RequestCode.GET_KV_CONFIG, namespace=ns, key="T")
    assert missing.code == ResponseCode.QUERY_NOT_FOUND
    assert "T" in missing.remark
    put = await call(client, namesrv, RequestCode.PUT_KV_CONFIG, namespace=ns, key="T", value="broker-a:4")
    assert put.code == ResponseCode.SUCCESS
    await call(client, namesrv, RequestCode.PUT_KV_CONFIG, namespace=ns, key="U", value="broker-b:2")

    got = await call(client, namesrv, RequestCode.GET_KV_CONFIG, namespace=ns, key="T")
    assert (got.code, got.ext_fields) == (ResponseCode.SUCCESS, {"value": "broker-a:4"})
    listed = await call(client, namesrv, RequestCode.GET_KVLIST_BY_NAMESPACE, namespace=ns)
    assert decode_body(KVTable, listed.body).table == {"T": "broker-a:4", "U": "broker-b:2"}

    await call(client, namesrv, RequestCode.DELETE_KV_CONFIG, namespace=ns, key="T")
    await call(client, namesrv, RequestCode.DELETE_KV_CONFIG, namespace=ns, key="U")
    gone = await call(client, namesrv, RequestCode.GET_KV_CONFIG, namespace=ns, key="T")
    assert gone.code == ResponseCode.QUERY_NOT_FOUND
    empty = await call(client, namesrv, RequestCode.GET_KVLIST_BY_NAMESPACE, namespace=ns)
    assert empty.code == ResponseCode.QUERY_NOT_FOUND


async def test_kv_config_survives_a_restart_in_its_file_and_reaches_brokers(tmp_path, client, brokers):
    path = tmp_path / "namesrv" / "kvConfig.json"
    config = NamesrvConfig(
        listen_host="127.0.0.1", listen_port=0, kv_config_path=path, order_message_enable=True
    )
    first = NameServer(config)
    await first.start()
    await call(
        client, first, RequestCode.PUT_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="T", value="broker-a:4"
    )
    await first.stop()
    assert json.loads(path.read_text()) == {"configTable": {"ORDER_TOPIC_CONFIG": {"T": "broker-a:4"}}}

    second = NameServer(config)
    await second.start()
    try:
        answer = await brokers().register(second, {"T": 4})
        assert decode_body(KVTable, answer.body).table == {"T": "broker-a:4"}  # brokers learn ordered topics
        assert (await route(client, second, "T")).order_topic_conf == "broker-a:4"
    finally:
        await second.stop()


# --- bad requests ------------------------------------------------------------------------------


async def test_bad_requests_get_clear_errors_and_change_nothing(namesrv, client, brokers):
    broker = brokers()
    good = broker.registration({"T": 4})

    no_addr = {k: v for k, v in good.ext_fields.items() if k != "brokerAddr"}
    answer = await call(client, namesrv, RequestCode.REGISTER_BROKER, body=good.body, **no_addr)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "brokerAddr" in answer.remark

    wrong_crc = {**good.ext_fields, "bodyCrc32": str((int(good.ext_fields["bodyCrc32"]) + 1) & 0x7FFFFFFF)}
    answer = await call(client, namesrv, RequestCode.REGISTER_BROKER, body=good.body, **wrong_crc)
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")

    no_crc = {k: v for k, v in good.ext_fields.items() if k != "bodyCrc32"}
    answer = await call(client, namesrv, RequestCode.REGISTER_BROKER, body=b"{not json", **no_crc)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "RegisterBrokerBody" in answer.remark

    answer = await call(
        client, namesrv, RequestCode.REGISTER_BROKER, body=good.body, **{**good.ext_fields, "brokerId": "x"}
    )
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "brokerId" in answer.remark

    answer = await call(client, namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "topic" in answer.remark

    answer = await call(client, namesrv, RequestCode.PUT_KV_CONFIG, namespace="N", key="K")
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "value" in answer.remark

    topics = await call(client, namesrv, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert decode_body(TopicList, topics.body).topic_list == []
    await broker.register(namesrv)  # and the same connection still works
    assert (await route(client, namesrv, "T")).broker_datas[0].broker_name == "broker-a"


async def test_name_servers_side_by_side_are_independent(client, brokers):
    servers = [NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0)) for _ in range(2)]
    for server in servers:
        await server.start()
    try:
        broker = brokers()
        for server in servers:  # a broker registers with every NameServer
            await broker.register(server)
        await call(client, servers[0], RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="T")
        assert (await route(client, servers[0], "T")).code == ResponseCode.TOPIC_NOT_EXIST
        assert (await route(client, servers[1], "T")).broker_datas[0].broker_name == "broker-a"
        await broker.register(servers[0], version=2)  # the next registration brings it back
        assert (await route(client, servers[0], "T")).broker_datas[0].broker_name == "broker-a"
    finally:
        for server in servers:
            await server.stop()


# --- the command --------------------------------------------------------------------------------

NAMESRV_COMMAND = [sys.executable, "-c", "from ferrymq.cli.namesrv import namesrv; namesrv()"]


async def test_the_namesrv_command_serves_and_stops_cleanly_on_sigterm(client):
    process = await asyncio.create_subprocess_exec(
        *NAMESRV_COMMAND, "--listen", "127.0.0.1:0", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        assert match, line
        answer = await client.invoke(
            f"127.0.0.1:{match[1]}",
            RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "T"}),
        )
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST
        process.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 0, err.decode()
        assert "stopped" in out.decode()
        assert b"Traceback" not in err
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def test_the_namesrv_command_rejects_a_bad_listen_address():
    result = subprocess.run(
        [*NAMESRV_COMMAND, "--listen", "9876"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert "HOST:PORT" in result.stderr


async def test_stopping_leaves_none_of_its_tasks_running(brokers):
    before = asyncio.all_tasks()
    config = NamesrvConfig(listen_host="127.0.0.1", listen_port=0, scan_not_active_broker_interval=50)
    namesrv = NameServer(config)
    await namesrv.start()
    await brokers().register(namesrv)
    assert {task for task in asyncio.all_tasks() if task not in before}, "its scanner runs until it stops"
    await namesrv.stop(grace=1)
    assert {task for task in asyncio.all_tasks() if task not in before and not task.done()} == set()


def test_an_acting_master_stands_in_read_only_while_its_master_is_gone():
    table = RouteTable(broker_timeout=120.0)
    wrapper = TopicConfigSerializeWrapper(topic_config_table={"T": TopicConfig(topic_name="T", perm=6)})
    for broker_id, addr in ((0, "a:0"), (1, "a:1"), (2, "a:2")):
        header = RegisterBrokerRequestHeader(
            broker_name="broker-a", broker_addr=addr, cluster_name="C", broker_id=broker_id,
            ha_server_addr="h", enable_acting_master=True,
        )  # fmt: skip
        table.register_broker(header, wrapper, channel=addr)
    route = table.topic_route("T")
    assert route.broker_datas[0].broker_addrs == {0: "a:0", 1: "a:1", 2: "a:2"}
    assert route.queue_datas[0].perm == 6

    table.remove_channel("a:0")  # the master is gone: the lowest slave stands in, read-only
    route = table.topic_route("T")
    assert route.broker_datas[0].broker_addrs == {0: "a:1", 1: "a:1", 2: "a:2"}
    assert route.queue_datas[0].perm == 4
    assert table.cluster_info().broker_addr_table["broker-a"].broker_addrs == {1: "a:1", 2: "a:2"}
    assert table.topic_route("T").queue_datas[0].perm == 4  # the table itself is unchanged


def test_an_acting_slave_that_registers_alone_brings_its_group_back_into_the_routes():
    """Every broker of the group gone (the acting slave restarted): its registration alone lists
    the group again, read-only; without acting master a slave's registration lists nothing."""
    wrapper = TopicConfigSerializeWrapper(topic_config_table={"T": TopicConfig(topic_name="T", perm=6)})
    for acting in (True, False):
        table = RouteTable(broker_timeout=120.0)
        for broker_id, addr in ((0, "a:0"), (1, "a:1")):
            header = RegisterBrokerRequestHeader(
                broker_name="broker-a", broker_addr=addr, cluster_name="C", broker_id=broker_id,
                ha_server_addr="h", enable_acting_master=acting,
            )  # fmt: skip
            table.register_broker(header, wrapper, channel=addr)
        table.remove_channel("a:0")
        table.remove_channel("a:1")
        assert table.topic_route("T") is None
        table.register_broker(header, wrapper, channel="a:1")
        route = table.topic_route("T")
        if acting:
            assert route.broker_datas[0].broker_addrs == {0: "a:1", 1: "a:1"}
            assert route.queue_datas[0].perm == 4
        else:
            assert route is None


def test_without_acting_master_a_group_without_master_has_none_in_its_routes():
    table = RouteTable(broker_timeout=120.0)
    wrapper = TopicConfigSerializeWrapper(topic_config_table={"T": TopicConfig(topic_name="T", perm=6)})
    for broker_id, addr in ((0, "a:0"), (1, "a:1")):
        header = RegisterBrokerRequestHeader(broker_name="broker-a", broker_addr=addr, cluster_name="C",
                                             broker_id=broker_id, ha_server_addr="h")  # fmt: skip
        table.register_broker(header, wrapper, channel=addr)
    table.remove_channel("a:0")
    assert table.topic_route("T").broker_datas[0].broker_addrs == {1: "a:1"}
