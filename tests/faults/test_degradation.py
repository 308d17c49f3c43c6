"""Degradation with real processes: the whole primary cluster SIGKILLed while a producer sends at a
steady rate. Its sends keep succeeding (on the standby), and once the primary is restarted the relay
puts everything back: a consumer of the primary receives every acknowledged message. How fast is
measured by bench/degradation.py, not here."""

from __future__ import annotations

import pytest

from ferrymq.bench.degradation import degradation_trial

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]


async def test_whole_primary_killed_sends_go_on_and_every_acked_message_reaches_the_primary(tmp_path):
    trial = await degradation_trial(tmp_path, rate=100.0, warmup=2.0, outage=4.0, after=1.0)
    print(trial)
    assert trial["failed"] == 0, trial["first_failures"]
    assert trial["to_standby"] > 0 and trial["acked"] == trial["sent"]
    assert trial["lost"] == 0, trial
    assert trial["first_primary_ack_after_return_s"] is not None  # the producer went back to the primary
