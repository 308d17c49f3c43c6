"""A DLedger group whose brokers enforce TLS: the members speak Raft over TLS on their peer ports
(the client port's certificate and mode, as the HA port), and a plaintext connection to a peer port
is turned away."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ferrymq.ha.dledger import wire
from ferrymq.ha.dledger.messages import VoteRequest
from ferrymq.ha.dledger.transport import LENGTH
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer
from ferrymq.net import RemotingClient
from ferrymq.net.tls import ClientTLS
from tests.ha.conftest import Group, eventually
from tests.ha.dledger.test_group import elect, send_all, start_group, stored_everywhere
from tests.pki import client_settings, pki, server_settings  # noqa: F401  (fixture)


async def test_raft_between_members_goes_over_tls_and_plaintext_is_refused(tmp_path, pki, caplog):  # noqa: F811
    namesrv = NameServer(
        NamesrvConfig(listen_host="127.0.0.1", listen_port=0, **server_settings(pki, "permissive"))
    )
    await namesrv.start()
    client = RemotingClient(tls=ClientTLS(trust_cert_path=str(pki.ca.cert)).context())
    group = Group(tmp_path, namesrv, client)
    try:
        brokers = await start_group(group, **server_settings(pki), **client_settings(pki))
        master = await elect(brokers)
        keys = [b"over tls %d" % i for i in range(20)]
        await send_all(group, master, keys)
        await stored_everywhere(brokers, keys)
        host, port = master.config.dledger_peer_map[master.config.dledger_self_id]
        with caplog.at_level(logging.WARNING, "ferrymq.net.listener"):
            reader, writer = await asyncio.open_connection(host, port)
            parts = wire.encode(VoteRequest("n9", master.config.dledger_self_id, 99, 0, 0, False, False))
            writer.writelines([LENGTH.pack(sum(map(len, parts))), *parts])
            with contextlib.suppress(ConnectionResetError):
                assert await asyncio.wait_for(reader.read(), 10) == b""  # closed on us
            writer.close()
            refused = f"port ({port}) is TLS only"
            await eventually(lambda: refused in caplog.text, 10, "the Raft port to refuse")
        assert master.is_master and master.dledger is not None and master.dledger.raft.term < 99
    finally:
        await group.client.close()
        for broker in reversed(group.brokers):
            await broker.stop()
        await namesrv.stop()
