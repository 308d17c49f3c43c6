"""Replication over TLS: a master enforcing TLS on its client and HA ports, a slave that speaks TLS to
it (and to a permissive NameServer), and a plaintext slave the HA port turns away."""

from __future__ import annotations

import logging

from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.server import NameServer
from ferrymq.net import RemotingClient
from ferrymq.net.tls import ClientTLS
from ferrymq.protocol.codes import ResponseCode
from tests.ha.conftest import Group, caught_up, commitlog_bytes, eventually
from tests.pki import client_settings, pki, server_settings  # noqa: F401  (fixture)


async def test_a_slave_replicates_over_tls_and_a_plaintext_one_is_refused(tmp_path, pki, caplog):  # noqa: F811
    namesrv = NameServer(
        NamesrvConfig(listen_host="127.0.0.1", listen_port=0, **server_settings(pki, "permissive"))
    )
    await namesrv.start()
    group = Group(
        tmp_path, namesrv, RemotingClient(tls=ClientTLS(trust_cert_path=str(pki.ca.cert)).context())
    )
    tls = {**server_settings(pki), **client_settings(pki)}
    try:
        master = await group.start("m", **tls)
        slave = await group.start("s", broker_role="SLAVE", broker_id=1, **tls)
        for i in range(50):
            assert (await group.send(master, b"secret %d" % i)).code == ResponseCode.SUCCESS
        await caught_up(slave, master)
        assert commitlog_bytes(slave) == commitlog_bytes(master)
        with caplog.at_level(logging.WARNING, "ferrymq.net.listener"):
            plain = await group.start("p", broker_role="SLAVE", broker_id=2)
            port = master.config.ha_listen_port
            await eventually(lambda: f"port ({port}) is TLS only" in caplog.text, 15, "the HA port to refuse")
        assert plain.store.commitlog.max_offset == 0 and not plain.ha_client.connected
    finally:
        await group.client.close()
        for broker in reversed(group.brokers):
            await broker.stop()
        await namesrv.stop()
