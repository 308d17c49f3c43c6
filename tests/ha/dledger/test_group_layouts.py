"""A mixed group: a member on DLedger's single log beside members on the two files of earlier
versions (or the other way round). Each refuses the other kind's entries with an error that names
both layouts, holds none of them (its dispatch never meets them), and the others commit without it."""

from __future__ import annotations

import logging

import pytest

from ferrymq.ha.dledger.commitlog_log import CommitLogRaftLog
from tests.ha.conftest import eventually
from tests.ha.dledger.test_group import MEMBERS, bodies, leader, send_all, start_group, stored_everywhere


@pytest.mark.parametrize("odd_on_single_log", [True, False], ids=["joins two files", "joins single log"])
async def test_a_member_of_the_other_layout_refuses_its_leaders_entries_and_the_rest_commit(
    group, caplog, odd_on_single_log
):
    odd = MEMBERS[2]
    for n in [n for n in MEMBERS if (n == odd) != odd_on_single_log]:
        root = group.tmp_path / n / "store" / "dledger"
        root.mkdir(parents=True)
        (root / "applied_to").touch()  # an applied mark: this member runs the two files
    caplog.set_level(logging.ERROR)
    brokers = await start_group(group, preferred_leader_id=MEMBERS[0])
    assert [isinstance(b.dledger.log, CommitLogRaftLog) for b in brokers if b.dledger] == [
        not odd_on_single_log,
        not odd_on_single_log,
        odd_on_single_log,
    ]
    await eventually(lambda: leader(brokers) is brokers[0], 30, "the preferred leader")
    expected = [b"k%d" % i for i in range(10)]
    await send_all(group, brokers[0], expected)
    await stored_everywhere(brokers[:2], expected)
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refusals and all(f"/{odd}/" in m and "Mixed groups" in m for m in refusals)
    mixed = "a put command: its leader runs the two files" if odd_on_single_log else "no put command"
    assert mixed in refusals[0]
    assert bodies(brokers[2], "T") == [] and brokers[2].dledger is not None
    assert brokers[2].dledger.log.last_index < brokers[0].dledger.log.last_index
    assert not [r for r in caplog.records if "dispatching stopped" in r.getMessage()]
