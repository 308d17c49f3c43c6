"""Members whose stores hold the two files of earlier versions keep them: the leader stores the puts
it proposed from the commands it holds, without decoding its entries again; followers decode what
they receive."""

from __future__ import annotations

from ferrymq.ha.dledger.entry import MAGIC_NORMAL
from ferrymq.ha.dledger.node import DLedgerNode
from ferrymq.ha.dledger.single import SingleLogNode
from tests.ha.dledger.test_group import elect, send_all, start_group, stored_everywhere


async def test_the_leader_applies_its_own_puts_without_decoding_them(group, monkeypatch):
    brokers = await start_group(group, two_files=True)
    master = await elect(brokers)
    decoded: dict[str, int] = {}
    put_of = DLedgerNode._put_of

    def counting(node, entry):
        if entry.magic == MAGIC_NORMAL:
            decoded[node.settings.self_id] = decoded.get(node.settings.self_id, 0) + 1
        return put_of(node, entry)

    monkeypatch.setattr(DLedgerNode, "_put_of", counting)
    expected = [f"own{i}".encode() for i in range(20)]
    await send_all(group, master, expected)
    await stored_everywhere(brokers, expected)
    followers = [b.config.dledger_self_id for b in brokers if b is not master]
    assert decoded.get(master.config.dledger_self_id, 0) == 0
    assert all(decoded.get(f, 0) >= len(expected) for f in followers)
    assert all(b.dledger is not None and not isinstance(b.dledger, SingleLogNode) for b in brokers)
