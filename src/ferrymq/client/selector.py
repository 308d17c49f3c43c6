"""Which messages of a topic a consumer wants: a tag expression or a SQL92 property filter."""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.client.instance import ClientError, ClientInstance
from ferrymq.net import RemotingError
from ferrymq.protocol.bodies import CheckClientRequestBody, SubscriptionData, encode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.hashes import java_hash
from ferrymq.protocol.remoting import RemotingCommand

TAG, SQL92 = "TAG", "SQL92"


@dataclass(frozen=True)
class MessageSelector:
    """`MessageSelector.tag("TagA || TagB")` (the broker checks tag hashes, the client the tags) or
    `MessageSelector.sql("region = 'eu' AND amount > 100")` (evaluated by the broker against each
    message's properties; the broker must run with `enable_property_filter = true`)."""

    expression: str = "*"
    type: str = TAG

    @classmethod
    def tag(cls, expression: str = "*") -> MessageSelector:
        return cls(expression, TAG)

    @classmethod
    def sql(cls, expression: str) -> MessageSelector:
        return cls(expression, SQL92)

    @classmethod
    def of(cls, selector: str | MessageSelector) -> MessageSelector:
        """A plain string is a tag expression."""
        return selector if isinstance(selector, MessageSelector) else cls.tag(selector)

    def tags(self) -> frozenset[str] | None:
        """The wanted tags; None for every tag (`*`) and for SQL92 (the broker has filtered)."""
        if self.type != TAG or self.expression.strip() in ("", "*"):
            return None
        return frozenset(t.strip() for t in self.expression.split("||"))

    def subscription(self, topic: str, version: int) -> SubscriptionData:
        """The heartbeat's description of this subscription."""
        if self.type != TAG:
            return SubscriptionData(topic=topic, sub_string=self.expression, sub_version=version,
                                    expression_type=self.type)  # fmt: skip
        tags = sorted(self.tags() or ())
        return SubscriptionData(
            topic=topic, sub_string=self.expression if tags else "*", tags_set=tags,
            code_set=[java_hash(t) for t in tags], sub_version=version,
        )  # fmt: skip


async def check_on_brokers(
    instance: ClientInstance, group: str, topic: str, selector: MessageSelector
) -> None:
    """Ask every broker of `topic` whether it can evaluate `selector` (CHECK_CLIENT_CONFIG), so a
    bad SQL92 expression, or a broker with property filtering off, fails at subscribe time."""
    if selector.type == TAG:
        return
    route = await instance.route(topic)
    body = CheckClientRequestBody(instance.client_id, group, selector.subscription(topic, 0))
    for name, addr in sorted(route.masters.items()):
        request = RemotingCommand(RequestCode.CHECK_CLIENT_CONFIG, body=encode_body(body))
        try:
            response = await instance.invoke(addr, request)
        except RemotingError as e:
            raise ClientError(f"cannot check the subscription to {topic} with broker {name}: {e}") from e
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"broker {name} refuses {selector.expression!r}: {response.remark}")
