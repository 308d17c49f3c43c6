"""Ports picked for servers started in other processes: each handed out once, and kept from every
other run on the machine until this one lets it go, so a server restarted on its port finds it free."""

from __future__ import annotations

import subprocess
import sys

from ferrymq.bench.processes import free_port


def test_one_process_never_hands_out_a_port_twice():
    ports = [free_port() for _ in range(400)]  # 400 random picks of ~12,000 would repeat one
    assert len(set(ports)) == len(ports)


def test_a_port_another_process_picked_is_not_handed_out_while_it_lives():
    code = "from ferrymq.bench.processes import free_ports; print(*free_ports(100)); input()"
    other = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None
        held = set(map(int, other.stdout.readline().split()))
        assert len(held) == 100
        mine = {free_port() for _ in range(1000)}
        assert not mine & held  # unreserved, about 8 of them would be
    finally:
        other.kill()
        other.wait()
