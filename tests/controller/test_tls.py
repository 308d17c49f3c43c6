"""A controller whose remoting port enforces TLS (its Raft port stays plaintext: pysyncobj has no TLS)."""

from __future__ import annotations

import pytest

from ferrymq.net import RemotingClient, RemotingError
from ferrymq.net.controllers import ControllerClient
from ferrymq.net.tls import ClientTLS
from ferrymq.protocol.codes import RequestCode, ResponseCode
from tests.pki import pki, server_settings  # noqa: F401  (fixture)


async def test_brokers_and_admins_reach_the_controller_over_tls_only(controller_group, pki):  # noqa: F811
    group = await controller_group(1, **server_settings(pki))
    await group.leader()
    secure = RemotingClient(tls=ClientTLS(trust_cert_path=str(pki.ca.cert)).context(), connect_timeout=2)
    plain = RemotingClient(connect_timeout=2)
    try:
        answer = await ControllerClient(group.addresses, secure).invoke(
            RequestCode.CONTROLLER_GET_METADATA_INFO
        )
        assert answer.code == ResponseCode.SUCCESS
        with pytest.raises(RemotingError):
            await ControllerClient(group.addresses, plain, timeout=2).invoke(
                RequestCode.CONTROLLER_GET_METADATA_INFO
            )
    finally:
        await secure.close()
        await plain.close()
