"""ConsumptionControl on its own: pause, per-client pause, token bucket, shutdown."""

from __future__ import annotations

import asyncio

from ferrymq.broker.clients import ClientRegistry
from ferrymq.broker.consumption import ConsumptionControl
from ferrymq.protocol.bodies import PAUSED, PAUSED_CLIENTS, RATE_LIMIT, ConsumerData, SubscriptionGroupConfig


def group(**attributes: str) -> SubscriptionGroupConfig:
    return SubscriptionGroupConfig("g", attributes=attributes)


async def test_no_controls_admit_everything_and_a_paused_group_waits_for_resume():
    control = ConsumptionControl(ClientRegistry())
    conn = object()
    assert control.gate("g") is None and await control.admit("g", conn, 32, 10) == 32
    control.update(group(**{PAUSED: "true"}))
    assert await control.admit("g", conn, 32, 0.05) == 0  # held for its hold time, then nothing
    waiting = asyncio.ensure_future(control.admit("g", conn, 32, 30))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    control.update(group())  # resumed: the held pull goes on at once
    assert await asyncio.wait_for(waiting, 5) == 32
    assert control.gate("g") is None


async def test_only_the_paused_clients_connections_wait():
    clients = ClientRegistry()
    paused_conn, other_conn = object(), object()
    clients.heartbeat_consumer("paused-client", paused_conn, ConsumerData(group_name="g"))
    clients.heartbeat_consumer("other-client", other_conn, ConsumerData(group_name="g"))
    control = ConsumptionControl(clients)
    control.update(group(**{PAUSED_CLIENTS: "paused-client"}))
    assert await control.admit("g", paused_conn, 32, 0.05) == 0
    assert await control.admit("g", other_conn, 32, 0.05) == 32


async def test_the_token_bucket_gives_a_second_up_front_then_the_rate():
    control = ConsumptionControl(ClientRegistry())
    control.update(group(**{RATE_LIMIT: "20"}))
    assert await control.admit("g", object(), 32, 0) == 20
    control.took("g", 20)
    assert await control.admit("g", object(), 32, 0) == 0  # no token left, and no time to wait
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await control.admit("g", object(), 32, 5) >= 1  # the next token is due in 1/20 s
    assert loop.time() - started < 2
    control.update(group(**{RATE_LIMIT: "20", PAUSED: "true"}))  # the same limit keeps its debt
    assert control.gate("g").bucket.tokens < 20


async def test_shutdown_answers_held_pulls_with_nothing():
    control = ConsumptionControl(ClientRegistry())
    control.update(group(**{PAUSED: "true"}))
    waiting = asyncio.ensure_future(control.admit("g", object(), 32, 30))
    await asyncio.sleep(0.05)
    control.close()
    assert await asyncio.wait_for(waiting, 5) == 0
