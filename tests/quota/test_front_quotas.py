"""A front that reaches the brokers over remoting (standalone proxy or gateway) applies the brokers'
``User:`` quotas to the user each call is made for (CALLER), since the brokers see only the front's
own AccessKey: puts over the user's produce quota get flow control, pops over its consume quota get
fewer messages or none; other users, and calls made for nobody, go on."""

from __future__ import annotations

import asyncio
import contextvars

from ferrymq.client import Admin
from ferrymq.messaging.remote import RemoteMessageService
from ferrymq.protocol.caller import CALLER
from ferrymq.protocol.codes import FLOW_CONTROL_REMARK, ResponseCode
from ferrymq.protocol.message_ext import decode_records


async def as_user(user: str | None, call):
    """Run ``call()`` with CALLER = ``user``, as a front's gate or login sets it."""
    context = contextvars.copy_context()
    context.run(CALLER.set, user)
    return await asyncio.create_task(call(), context=context)


async def test_a_users_produce_and_consume_quotas_apply_at_the_front(make_cluster):
    cluster = await make_cluster()
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic("Metered", 1)
        await admin.set_quota("produce", "User:app", messages=10)
        await admin.set_quota("consume", "User:app", messages=10)
    async with RemoteMessageService(cluster.namesrv_addr) as front:
        outcomes = [await as_user("app", lambda: front.send("Metered", b"m")) for _ in range(5)]
        refused = [o for o in outcomes if o.code == ResponseCode.SYSTEM_BUSY]
        assert outcomes[0].code == ResponseCode.SUCCESS and refused  # a burst of one, then 10 a second
        assert refused[0].remark.startswith(f"{FLOW_CONTROL_REMARK}quota exceeded: User:app may produce 10")
        for who in ("other", None):
            others = [await as_user(who, lambda: front.send("Metered", b"m")) for _ in range(5)]
            assert {o.code for o in others} == {ResponseCode.SUCCESS}

        first = await as_user("app", lambda: front.pop("g", "Metered", 32, poll_ms=0))
        assert first.code == ResponseCode.SUCCESS and len(decode_records(first.body)) == 1
        held = await as_user("app", lambda: front.pop("g", "Metered", 32, poll_ms=0))
        assert (
            held.code == ResponseCode.POLLING_TIMEOUT and "User:app is over its consume quota" in held.remark
        )
        waited = await as_user("app", lambda: front.pop("g", "Metered", 32, poll_ms=1000))
        assert waited.code == ResponseCode.SUCCESS and len(decode_records(waited.body)) == 1
        free = await as_user("other", lambda: front.pop("g", "Metered", 32, poll_ms=1000))
        assert free.code == ResponseCode.SUCCESS and len(decode_records(free.body)) > 1


async def test_what_a_fronts_feeds_deliver_counts_against_the_users_consume_quota(make_cluster):
    """The AMQP gateway's feeds pop for many users at once and ask, without waiting, what one may
    take: the quotas as last read (the first ask starts a read in the background), charged per
    delivery."""
    cluster = await make_cluster()
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.set_quota("consume", "User:app", messages=10)
    async with RemoteMessageService(cluster.namesrv_addr) as front:
        assert front.user_consume_allowance("app") == (float("inf"), 0.0)  # not read yet
        async with asyncio.timeout(10):
            while front.user_consume_allowance("app")[0] == float("inf"):
                await asyncio.sleep(0.01)
        assert front.user_consume_allowance("app")[0] == 1  # a bucket of 0.1 s: one message
        front.charge_user_consume("app", 1, 100)
        allowed, wait = front.user_consume_allowance("app")
        assert allowed < 1 and 0 < wait <= 0.1
        assert front.user_consume_allowance("other") == (float("inf"), 0.0)
