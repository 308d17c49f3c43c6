"""basic.consume through two standalone gateways in front of one cluster, with pika (BlockingConnection)
in pika's own venv: what the consumers on each gateway saw, as one JSON line.
Usage: pika_remote_consume.py SCENARIO HOST PORT_A PORT_B [PAUSE_S]; A consumes, B publishes."""

from __future__ import annotations

import json
import sys
import time
import uuid

import pika

scenario, host, port_a, port_b = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
QUEUE = f"ferrymq-remote-{uuid.uuid4().hex[:8]}"
WAIT = 15.0  # the most any one expected delivery may take


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(host, port, socket_timeout=10))


class Reader:
    """A manual-ack consumer of QUEUE on its own connection, recording what it was given."""

    def __init__(self, port: int, prefetch: int) -> None:
        self.connection = connect(port)
        self.channel = self.connection.channel()
        self.channel.basic_qos(prefetch_count=prefetch)
        self.got: list[list] = []  # [body, redelivered]
        self.unacked: list[int] = []
        self.most_unacked = 0
        self.channel.basic_consume(QUEUE, self._delivered)

    def _delivered(self, channel, method, properties, body: bytes) -> None:
        self.got.append([body.decode(), method.redelivered])
        self.unacked.append(method.delivery_tag)
        self.most_unacked = max(self.most_unacked, len(self.unacked))

    def ack(self, count: int | None = None) -> None:
        """The oldest `count` unacked deliveries (all by default), one ack each."""
        taken = self.unacked[:count] if count is not None else list(self.unacked)
        for tag in taken:
            self.channel.basic_ack(tag)
        del self.unacked[: len(taken)]

    def bodies(self) -> list[str]:
        return [body for body, _ in self.got]


def pump(readers: list[Reader], until, wait: float = WAIT) -> bool:
    """Process every reader's events until `until()` holds or `wait` passes: whether it held."""
    deadline = time.monotonic() + wait
    while not until():
        if time.monotonic() >= deadline:
            return False
        for reader in readers:
            reader.connection.process_data_events(time_limit=0.02)
    return True


def publisher() -> tuple[pika.BlockingConnection, object]:
    """A confirming channel on gateway B that declared QUEUE."""
    connection = connect(port_b)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare(QUEUE)
    return connection, channel


def publish(channel, bodies: list[str]) -> None:
    for body in bodies:
        channel.basic_publish("", QUEUE, body.encode())


def finish(connection, channel, *readers: Reader) -> None:
    for reader in readers:
        if reader.connection.is_open:
            reader.connection.close()
    channel.queue_delete(QUEUE)
    connection.close()


def in_order_once() -> dict:
    """Every message published on B reaches A's consumer once, in order; the acks hold: after a
    reconnect, a marker published last is the first thing delivered."""
    connection, channel = publisher()
    reader = Reader(port_a, prefetch=10)
    sent = [f"m{i}" for i in range(40)]
    publish(channel, sent)

    def acked_all() -> bool:
        reader.ack()
        return len(reader.got) >= len(sent)

    pump([reader], acked_all)
    pump([reader], lambda: False, wait=0.2)  # (any duplicate a redelivery would add)
    got = reader.got
    reader.connection.close()
    again = Reader(port_a, prefetch=10)
    publish(channel, ["marker"])
    pump([again], lambda: bool(again.got))
    again.ack()
    finish(connection, channel, again)
    return {"got": got, "after_reconnect": again.got}


def shared() -> dict:
    """One consumer per gateway on the same queue: each takes a share, none twice, all together."""
    connection, channel = publisher()
    readers = [Reader(port_a, prefetch=2), Reader(port_b, prefetch=2)]
    sent = [f"m{i}" for i in range(40)]
    publish(channel, sent)

    def all_in() -> bool:
        for reader in readers:
            reader.ack()
        return sum(len(r.got) for r in readers) >= len(sent)

    pump(readers, all_in)
    pump(readers, lambda: False, wait=0.2)
    finish(connection, channel, *readers)
    return {"a": readers[0].bodies(), "b": readers[1].bodies()}


def back_on_close() -> dict:
    """A's consumer holds three unacked deliveries; when its connection closes, B's consumer (already
    consuming) gets them, marked redelivered."""
    connection, channel = publisher()
    publish(channel, [f"m{i}" for i in range(5)])
    holder = Reader(port_a, prefetch=3)
    pump([holder], lambda: len(holder.got) >= 3)
    other = Reader(port_b, prefetch=10)
    pump([holder, other], lambda: len(other.got) >= 2)
    held = holder.got
    holder.connection.close()

    def all_in() -> bool:
        other.ack()
        return len(other.got) >= 5

    pump([other], all_in)
    pump([other], lambda: False, wait=0.2)
    finish(connection, channel, other)
    return {"held": held, "other": sorted(other.got)}


def prefetch_held() -> dict:
    """With prefetch 3, A's consumer acks one delivery at a time, only once it holds three (or all
    that are left): it never holds more than three."""
    connection, channel = publisher()
    reader = Reader(port_a, prefetch=3)
    sent = [f"m{i}" for i in range(12)]
    publish(channel, sent)
    while len(reader.got) < len(sent):
        holds = min(3, len(sent) - len(reader.got) + len(reader.unacked))
        if not pump([reader], lambda holds=holds: len(reader.unacked) >= holds):
            break
        pump([reader], lambda: False, wait=0.3)  # time for a fourth delivery to come, if it would
        reader.ack(1)
    finish(connection, channel, reader)
    return {"got": reader.bodies(), "most_unacked": reader.most_unacked}


def idle_then_late() -> dict:
    """A's consumer gets one message, idles past the gateway's long-poll hold (PAUSE_S), then gets
    one published after that."""
    pause = float(sys.argv[5])
    connection, channel = publisher()
    reader = Reader(port_a, prefetch=10)
    publish(channel, ["early"])
    pump([reader], lambda: bool(reader.got))
    reader.ack()
    idle_from = time.monotonic()
    pump([reader], lambda: False, wait=pause)
    connection.process_data_events(time_limit=0)  # (the publisher's heartbeats)
    publish(channel, ["late"])
    pump([reader], lambda: len(reader.got) >= 2)
    reader.ack()
    idle = time.monotonic() - idle_from
    finish(connection, channel, reader)
    return {"got": reader.bodies(), "idle_s_at_least": idle >= pause}


SCENARIOS = {
    "in_order_once": in_order_once,
    "shared": shared,
    "back_on_close": back_on_close,
    "prefetch_held": prefetch_held,
    "idle_then_late": idle_then_late,
}
print(json.dumps(SCENARIOS[scenario]()), flush=True)
