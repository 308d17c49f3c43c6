"""`ferrymq bench pop` and `ferrymq bench pop-redelivery`: pop consumption against a broker process.

`pop`: one consumer pops batches of 32 (queue -1) and settles each batch with one BATCH_ACK built
from the response header (startOffsetInfo / msgOffsetInfo: the client decodes nothing); then a
pull consumer of another group reads the same messages; msg/s and the broker's CPU per message of
both, and their ratio. `pop-redelivery`: messages popped and never acked; how late each one
reappears after its invisible time ended (p50/p99).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

from ferrymq.bench.client import CpuMeter, Progress, _figures
from ferrymq.client import ClientInstance, Message, MessageQueue, Producer, pop_calls
from ferrymq.client.pull import PullStatus, pull_raw
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.message_ext import decode_records
from ferrymq.protocol.pop import (
    INIT_MODE_MIN,
    POP_CK,
    BatchAck,
    BatchAckMessageRequestBody,
    ReceiptHandle,
    encode_batch_ack_body,
    java_bitset_encode,
)
from ferrymq.protocol.remoting import RemotingCommand

BATCH = 32


async def _load(namesrv: str, topic: str, count: int, body_size: int, progress: Progress) -> None:
    body = os.urandom(body_size)
    async with Producer("ferrymq-bench", namesrv) as producer:
        for start in range(0, count, 64):
            await producer.send_batch([Message(topic, body) for _ in range(min(64, count - start))])
            progress("loading", min(start + 64, count), count)


async def _broker(instance: ClientInstance, topic: str) -> tuple[str, str]:
    route = await instance.route(topic)
    name, addr = sorted(route.masters.items())[0]
    return name, addr


async def _pop(instance: ClientInstance, addr: str, group: str, topic: str, invisible_ms: int, poll_ms: int):
    """A pop of up to BATCH messages from any queue, a new group starting at the first."""
    return await pop_calls.pop(
        instance, addr, group, topic, max_messages=BATCH, invisible_ms=invisible_ms, poll_ms=poll_ms,
        expression_type="TAG", expression="*", init_mode=INIT_MODE_MIN,
    )  # fmt: skip


def batch_ack_body(group: str, topic: str, broker: str, header: dict[str, str]) -> tuple[bytes, int]:
    """The BATCH_ACK of a whole pop answer, from its header alone; and how many messages it acks."""
    starts = {}
    for part in header["startOffsetInfo"].split(";"):
        kind, queue_id, first = part.split(" ")
        starts[(kind, queue_id)] = int(first)
    acks, count = [], 0
    for part in header["msgOffsetInfo"].split(";"):
        kind, queue_id, offsets = part.split(" ")
        start = starts[(kind, queue_id)]
        values = [int(o) for o in offsets.split(",")]
        count += len(values)
        bits = 0
        for o in values:
            bits |= 1 << (o - start)
        acks.append(BatchAck(
            consumer_group=group, topic=topic, retry=kind, start_offset=start, queue_id=int(queue_id),
            revive_queue_id=int(header["reviveQid"]), pop_time=int(header["popTime"]),
            invisible_time=int(header["invisibleTime"]), bit_set=java_bitset_encode(bits),
        ))  # fmt: skip
    return encode_batch_ack_body(BatchAckMessageRequestBody(broker_name=broker, acks=acks)), count


async def pop_vs_pull(namesrv: str, count: int, body_size: int, inflight: int, progress: Progress,
                      cpu_factory: Callable[[], CpuMeter]) -> dict:  # fmt: skip
    topic = f"BenchPop{time.time_ns()}"
    instance = ClientInstance(namesrv)
    await instance.start()
    try:
        await _create_topic(instance, namesrv, topic)
        await _load(namesrv, topic, count, body_size, progress)
        broker, addr = await _broker(instance, topic)
        pop = await _pop_all(instance, addr, broker, topic, count, inflight, progress, cpu_factory)
        pull = await _pull_all(instance, broker, addr, topic, count, inflight, progress, cpu_factory)
    finally:
        await instance.close()
    ratio = None
    if pop.get("broker_us_per_msg") and pull.get("broker_us_per_msg"):
        ratio = round(pop["broker_us_per_msg"] / pull["broker_us_per_msg"], 2)
    return {
        **_figures(
            f"pop batch={BATCH} + batch ack, inflight={inflight}", pop["messages"], body_size, pop["s"]
        ),
        "broker_us_per_msg": pop.get("broker_us_per_msg"),
        "client_us_per_msg": pop.get("client_us_per_msg"),
        "pull_msgs_per_s": round(pull["messages"] / pull["s"]),
        "pull_broker_us_per_msg": pull.get("broker_us_per_msg"),
        "pop_over_pull_broker_cpu": ratio,
    }


async def _create_topic(instance: ClientInstance, namesrv: str, topic: str) -> None:
    """A topic with QUEUES queues, by sending once (auto-creation) and waiting for its route."""
    async with Producer("ferrymq-bench", namesrv) as producer:
        await producer.send(Message(topic, b"warm-up"))
    while await instance.existing_route(topic) is None:
        await asyncio.sleep(0.05)


async def _pop_all(instance, addr, broker, topic, count, inflight, progress, cpu_factory) -> dict:
    group = f"bench-pop-{time.time_ns()}"
    got = 0
    total = count + 1  # with the warm-up message
    cpu = cpu_factory()
    started = time.perf_counter()

    async def worker() -> None:
        nonlocal got
        while got < total:
            response = await _pop(instance, addr, group, topic, 60_000, 0)
            if response.code != ResponseCode.SUCCESS:
                if response.code == ResponseCode.POLLING_TIMEOUT:
                    return  # nothing left
                raise RuntimeError(f"pop refused: {response.remark}")
            body, n = batch_ack_body(group, topic, broker, response.ext_fields)
            ack = await instance.invoke(addr, RemotingCommand(RequestCode.BATCH_ACK_MESSAGE, body=body), 10)
            if ack.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"batch ack refused: {ack.remark}")
            got += n
            progress("pop", got, total)

    await asyncio.gather(*(worker() for _ in range(inflight)))
    seconds = time.perf_counter() - started
    return {"messages": got, "s": seconds, **cpu.result(got)}


async def _pull_all(instance, broker, addr, topic, count, inflight, progress, cpu_factory) -> dict:
    group = f"bench-pull-{time.time_ns()}"
    total = count + 1
    got = 0
    cpu = cpu_factory()
    started = time.perf_counter()
    queues = [mq for mq in (await instance.route(topic)).read_queues if mq.broker_name == broker]
    offsets = dict.fromkeys(queues, 0)

    async def worker(mine: list[MessageQueue]) -> None:
        nonlocal got
        while mine:
            for mq in list(mine):
                raw = await pull_raw(instance, addr, mq, group, offsets[mq], max_messages=BATCH)
                if raw.status is not PullStatus.FOUND:
                    mine.remove(mq)
                    continue
                offsets[mq] = raw.next_begin_offset
                pos = n = 0
                while pos < len(raw.body):
                    pos += int.from_bytes(raw.body[pos : pos + 4], "big")
                    n += 1
                got += n
                progress("pull", got, total)

    await asyncio.gather(*(worker(queues[i::inflight]) for i in range(min(inflight, len(queues)))))
    seconds = time.perf_counter() - started
    return {"messages": got, "s": seconds, **cpu.result(got)}


async def redelivery(namesrv: str, count: int, invisible_ms: int, progress: Progress,
                     cpu_factory: Callable[[], CpuMeter]) -> dict:  # fmt: skip
    """Pop `count` messages without acking; time when each comes back after its invisible time."""
    topic = f"BenchRedeliver{time.time_ns()}"
    group = f"bench-redeliver-{time.time_ns()}"
    instance = ClientInstance(namesrv)
    await instance.start()
    try:
        await _create_topic(instance, namesrv, topic)
        await _load(namesrv, topic, count, 64, progress)
        _, addr = await _broker(instance, topic)
        total = count + 1
        visible_at: dict[bytes, int] = {}
        while len(visible_at) < total:
            response = await _pop(instance, addr, group, topic, invisible_ms, 1000)
            if response.code != ResponseCode.SUCCESS:
                break
            for m in decode_records(response.body):
                visible_at.setdefault(m.properties["UNIQ_KEY"].encode(), ReceiptHandle.decode(
                    m.properties[POP_CK]).visible_at)  # fmt: skip
            progress("pop, no ack", len(visible_at), total)
        cpu = cpu_factory()
        late: list[float] = []
        seen: set[bytes] = set()
        deadline = time.monotonic() + invisible_ms / 1000 + 120
        while len(seen) < len(visible_at) and time.monotonic() < deadline:
            response = await _pop(instance, addr, group, topic, 600_000, 2000)
            now = time.time() * 1000
            if response.code != ResponseCode.SUCCESS:
                continue
            for m in decode_records(response.body):
                key = m.properties["UNIQ_KEY"].encode()
                if key in visible_at and key not in seen:
                    seen.add(key)
                    late.append((now - visible_at[key]) / 1000)
            progress("redelivered", len(seen), len(visible_at))
    finally:
        await instance.close()
    late.sort()

    def pct(p: float) -> float | None:
        return round(late[min(len(late) - 1, int(p * len(late)))], 3) if late else None

    return {
        "system": "ferrymq",
        "scenario": f"pop redelivery, invisible {invisible_ms} ms",
        "messages": len(visible_at),
        "redelivered": len(late),
        "late_p50_s": pct(0.5),
        "late_p99_s": pct(0.99),
        "late_max_s": round(late[-1], 3) if late else None,
        **cpu.result(len(late)),
    }
