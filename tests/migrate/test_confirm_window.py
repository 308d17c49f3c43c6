"""The drainer's confirm window: whatever order and grouping the gateway's confirms come in, every
publish settles exactly once, in publish order, with the gateway's verdict."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ferrymq.migrate.drain import ConfirmWindow


@st.composite
def confirm_streams(draw):
    """(publish count, confirms as the server may send them: each sequence covered exactly once)."""
    count = draw(st.integers(1, 60))
    open_ = list(range(1, count + 1))
    confirms, verdict = [], {}
    while open_:
        ok = draw(st.booleans())
        if draw(st.booleans()):  # multiple: everything still open up to some sequence
            upto = draw(st.sampled_from(open_))
            covered = [s for s in open_ if s <= upto]
            confirms.append((upto, True, ok))
        else:
            covered = [draw(st.sampled_from(open_))]
            confirms.append((covered[0], False, ok))
        for s in covered:
            verdict[s] = ok
            open_.remove(s)
    return count, confirms, verdict


@given(confirm_streams())
def test_every_publish_settles_once_in_order(stream) -> None:
    count, confirms, verdict = stream
    window = ConfirmWindow()
    tags = [100 + 3 * i for i in range(count)]
    for tag in tags:
        window.add(tag)
    settled = []
    for seq, multiple, ok in confirms:
        settled += window.settle(seq, multiple, ok)
    assert [tag for tag, _ in settled] == tags
    assert [ok for _, ok in settled] == [verdict[s] for s in range(1, count + 1)]
    assert len(window) == 0


def test_a_single_confirm_past_the_head_waits_for_the_head() -> None:
    window = ConfirmWindow()
    for tag in (1, 2, 3):
        window.add(tag)
    assert window.settle(2, False, True) == []
    assert window.settle(1, False, False) == [(1, False), (2, True)]
    assert window.settle(3, True, True) == [(3, True)]
