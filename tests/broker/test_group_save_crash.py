"""A subscription group whose creation the broker acknowledged survives a SIGKILL right after:
the group file is written in the background, and the answer waits for the write that holds it."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.bench.processes import broker_process, free_port
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer
from ferrymq.net import RemotingClient
from ferrymq.protocol.bodies import (
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    decode_body,
    encode_body,
)
from ferrymq.protocol.codes import RequestCode as Req
from ferrymq.protocol.codes import ResponseCode as Res
from ferrymq.protocol.remoting import RemotingCommand

GROUPS = 200


@pytest.mark.crash
async def test_acknowledged_group_creations_survive_a_sigkill(tmp_path):
    namesrv = NameServer(NamesrvConfig(listen_host="127.0.0.1", listen_port=0))
    await namesrv.start()
    port = free_port()
    proc = broker_process(tmp_path, namesrv.port, port)
    client = RemotingClient()
    addr = f"127.0.0.1:{port}"

    async def call(code: int, body: bytes = b"") -> RemotingCommand:
        return await client.invoke(addr, RemotingCommand(code, body=body), 10.0)

    try:
        proc.start()
        await proc.wait_for_line("listening on", 60)
        answers = await asyncio.gather(
            *(
                call(Req.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, encode_body(SubscriptionGroupConfig(f"G{i}")))
                for i in range(GROUPS)
            )
        )
        proc.kill()  # no clean stop: nothing more is flushed
        assert all(a.code == Res.SUCCESS for a in answers)
        since = len(proc.log_text())
        proc.start()
        await proc.wait_for_line("listening on", 60, since=since)
        table = decode_body(
            SubscriptionGroupWrapper, (await call(Req.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body
        ).subscription_group_table
        assert {f"G{i}" for i in range(GROUPS)} <= set(table)
    finally:
        await client.close()
        proc.stop()
        await namesrv.stop()
