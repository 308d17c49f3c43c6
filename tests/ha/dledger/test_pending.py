"""Which waiting appends a commit index acknowledges, fails or leaves waiting."""

from __future__ import annotations

from ferrymq.ha.dledger.pending import PendingAppends


def test_a_commit_acknowledges_what_it_covers_with_the_same_term():
    p: PendingAppends[str] = PendingAppends()
    p.add(3, 2, "a")
    p.add(5, 2, "b")
    p.add(9, 2, "c")
    terms = {3: 2, 5: 2, 9: 2}
    assert p.settle(5, terms.__getitem__) == (["a", "b"], [])
    assert len(p) == 1
    assert p.settle(8, terms.__getitem__) == ([], [])
    assert p.settle(9, terms.__getitem__) == (["c"], [])


def test_an_entry_another_leader_replaced_fails_once_committed_over():
    p: PendingAppends[str] = PendingAppends()
    p.add(10, 3, "old leader's")  # proposed in term 3, then this node lost leadership
    p.add(9, 5, "after re-election")  # lower index, later term: settles first
    terms = {9: 5, 10: 5}
    assert p.settle(9, terms.__getitem__) == (["after re-election"], [])
    assert p.settle(10, terms.__getitem__) == ([], ["old leader's"])


def test_drop_all_hands_back_everything_in_index_order():
    p: PendingAppends[int] = PendingAppends()
    for index in (7, 2, 5):
        p.add(index, 1, index)
    assert p.drop_all() == [2, 5, 7] and len(p) == 0
