"""What clients and admin tools call: routes, cluster and topic listings, and the admin edits of
routes (delete a topic, wipe or restore a broker's write permission before maintenance)."""

from __future__ import annotations

from ferrymq.namesrv.kv_config import ORDER_TOPIC_CONFIG, KVConfigStore
from ferrymq.namesrv.route_table import RouteTable
from ferrymq.net import Connection, RemotingServer
from ferrymq.protocol.bodies import TopicList, encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.headers import (
    AddWritePermOfBrokerResponseHeader,
    BrokerNameRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from ferrymq.protocol.remoting import RemotingCommand


class RouteProcessor:
    def __init__(self, routes: RouteTable, kv: KVConfigStore, *, order_message_enable: bool = False) -> None:
        self._routes = routes
        self._kv = kv
        self._order_message_enable = order_message_enable

    def register_with(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self.get_route)
        server.register(RequestCode.GET_BROKER_CLUSTER_INFO, self.get_cluster_info)
        server.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.get_all_topics)
        server.register(RequestCode.GET_TOPICS_BY_CLUSTER, self.get_topics_by_cluster)
        server.register(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, self.get_system_topics)
        server.register(RequestCode.DELETE_TOPIC_IN_NAMESRV, self.delete_topic)
        server.register(RequestCode.WIPE_WRITE_PERM_OF_BROKER, self.wipe_write_perm)
        server.register(RequestCode.ADD_WRITE_PERM_OF_BROKER, self.add_write_perm)

    async def get_route(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        """Always standard JSON: Java's unquoted-key form for old clients is accepted by them all anyway."""
        header = GetRouteInfoRequestHeader.from_ext_fields(request.ext_fields)
        route = self._routes.topic_route(header.topic)
        if route is None:
            return request.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {header.topic}",
            )
        if self._order_message_enable:
            route.order_topic_conf = self._kv.get(ORDER_TOPIC_CONFIG, header.topic)
        return request.make_response(ResponseCode.SUCCESS, body=encode_body(route))

    async def get_cluster_info(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=encode_body(self._routes.cluster_info()))

    async def get_all_topics(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=encode_body(TopicList(self._routes.topics())))

    async def get_topics_by_cluster(
        self, connection: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetTopicsByClusterRequestHeader.from_ext_fields(request.ext_fields)
        topics = TopicList(self._routes.topics(header.cluster))
        return request.make_response(ResponseCode.SUCCESS, body=encode_body(topics))

    async def get_system_topics(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        names, broker_addr = self._routes.system_topics()
        return request.make_response(ResponseCode.SUCCESS, body=encode_body(TopicList(names, broker_addr)))

    async def delete_topic(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = DeleteTopicFromNamesrvRequestHeader.from_ext_fields(request.ext_fields)
        self._routes.delete_topic(header.topic, header.cluster_name)
        return request.make_response(ResponseCode.SUCCESS)

    async def wipe_write_perm(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = BrokerNameRequestHeader.from_ext_fields(request.ext_fields)
        answer = WipeWritePermOfBrokerResponseHeader(
            wipe_topic_count=self._routes.wipe_write_perm(header.broker_name)
        )
        return request.make_response(ResponseCode.SUCCESS, ext_fields=answer.to_ext_fields())

    async def add_write_perm(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = BrokerNameRequestHeader.from_ext_fields(request.ext_fields)
        answer = AddWritePermOfBrokerResponseHeader(
            add_topic_count=self._routes.add_write_perm(header.broker_name)
        )
        return request.make_response(ResponseCode.SUCCESS, ext_fields=answer.to_ext_fields())
