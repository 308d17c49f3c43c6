"""Compressed bodies, as RocketMQ 5's Java producer sends them, stored by a real broker and read back by
PullConsumer, PushConsumer, Admin, `ferrymq admin` and Spark's row conversion."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import zlib

import pytest

from ferrymq.client import Admin, Message, MessageQueue, Producer, PullConsumer
from ferrymq.client.pull import pull_raw
from ferrymq.client.trace_view import query_by_key as trace_lookup
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.errors import MessageDecodeError, ProtocolError
from ferrymq.protocol.message_ext import CompressedBodyError, decode_records
from ferrymq.protocol.properties import encode_properties
from ferrymq.protocol.sys_flag import COMPRESSED_FLAG
from tests.protocol.test_compression import CONTENT, java_lz4, java_zstd

from .test_push_consumer import eventually

rows = pytest.importorskip("ferrymq.spark.rows")  # pyspark's types; no SparkSession is started

JAVA_SENDS = {  # what a Java producer puts on the wire: (sysFlag, body)
    "legacy": (0x1, zlib.compress(CONTENT, 5)),
    "zlib": (0x301, zlib.compress(CONTENT, 5)),
    "lz4": (0x101, java_lz4(CONTENT)),
    "zstd": (0x201, java_zstd(CONTENT)),
}


async def send_raw(cluster, topic: str, queue_id: int, name: str, sys_flag: int, body: bytes) -> str:
    """SEND_MESSAGE_V2 as a Java producer fills it in; returns the offset message id."""
    props = encode_properties({"KEYS": f"k-{name}", "UNIQ_KEY": f"ID-{name}", "WAIT": "true"})
    ext = {"a": "java-producer", "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": sys_flag,
           "g": int(time.time() * 1000), "h": 0, "i": props, "j": 0, "k": "false"}  # fmt: skip
    response = await cluster.call(RequestCode.SEND_MESSAGE_V2, ext, body)
    assert response.code == ResponseCode.SUCCESS, response.remark
    return response.ext_fields["msgId"]


async def ferrymq_admin(cluster, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ferrymq", "admin", "--namesrv", cluster.namesrv_addr, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def pull_answer(cluster, admin: Admin, topic: str, queue_id: int) -> bytes:
    mq = MessageQueue(topic, cluster.broker.config.broker_name, queue_id)
    raw = await pull_raw(admin.instance, cluster.broker_addr, mq, "spark-reader", 0, max_messages=32)
    return raw.body


async def test_compressed_bodies_read_back_as_their_content_everywhere(cluster, make_topic, start_consumer):
    await make_topic("Zipped", 1)
    ids = {name: await send_raw(cluster, "Zipped", 0, name, *sent) for name, sent in JAVA_SENDS.items()}
    for compression in ("lz4", "zstd", "zlib"):  # and the SDK's producer, compressing like Java's
        async with Producer(f"p-{compression}", cluster.namesrv_addr, compression=compression) as producer:
            await producer.send(Message("Zipped", CONTENT, keys=f"k-sdk-{compression}"))
    await cluster.settled()
    expected = len(JAVA_SENDS) + 3

    async with PullConsumer("pull-reader", cluster.namesrv_addr, consume_from="first") as consumer:
        await consumer.subscribe("Zipped")
        got = []
        deadline = time.monotonic() + 15
        while len(got) < expected and time.monotonic() < deadline:
            got += await consumer.poll(1.0)
    assert [m.body for m in got] == [CONTENT] * expected
    assert all(not m.sys_flag & COMPRESSED_FLAG for m in got)
    assert [m.sys_flag for m in got[:4]] == [0x0, 0x300, 0x100, 0x200]  # the codec bits stay, as in Java
    assert [m.sys_flag for m in got[4:]] == [0x100, 0x200, 0x300]  # the SDK marks its codec like Java 5

    pushed = []

    async def listener(messages) -> bool:
        pushed.extend(messages)
        return True

    await start_consumer("push-reader", "Zipped", listener, consume_from="first")
    await eventually(lambda: len(pushed) >= expected, what="every pushed message")
    assert [m.body for m in pushed] == [CONTENT] * expected

    async with Admin(cluster.namesrv_addr) as admin:
        for name, offset_id in ids.items():
            assert (await admin.view_message(offset_id)).body == CONTENT
            [found] = await admin.query_by_key("Zipped", f"k-{name}")
            assert found.body == CONTENT and found.msg_id == f"ID-{name}"
            [traced] = await trace_lookup(admin.instance, cluster.broker_addr, "Zipped", f"k-{name}")
            assert traced.body == CONTENT
        batch = rows.records_to_batch([await pull_answer(cluster, admin, "Zipped", 0)], "broker-a")
    assert batch.column("body").to_pylist() == [CONTENT] * expected
    assert batch.column("msg_id").to_pylist()[:4] == [f"ID-{name}" for name in JAVA_SENDS]

    code, out, err = await ferrymq_admin(cluster, "message", ids["zstd"])
    assert code == 0, err
    assert f"{len(CONTENT)} bytes: {CONTENT[:200].decode()}" in out


async def test_a_body_that_does_not_decompress_is_named_and_stops_nothing_else(
    cluster, make_topic, start_consumer, caplog
):
    await make_topic("Broken", 2)
    lz4_flag, lz4_body = JAVA_SENDS["lz4"]
    await send_raw(cluster, "Broken", 0, "before", lz4_flag, lz4_body)
    bad_id = await send_raw(cluster, "Broken", 0, "bad", 0x201, lz4_body)  # says zstd, holds LZ4
    await send_raw(cluster, "Broken", 0, "after", lz4_flag, lz4_body)
    await send_raw(cluster, "Broken", 1, "other-queue", lz4_flag, lz4_body)
    await send_raw(cluster, "Broken", 1, "unknown-type", 0x501, lz4_body)  # no codec has type 5
    await cluster.settled()

    async with PullConsumer("pull-broken", cluster.namesrv_addr, consume_from="first") as consumer:
        await consumer.subscribe("Broken")
        got, errors = [], []
        deadline = time.monotonic() + 15
        while len(errors) < 2 and time.monotonic() < deadline:
            try:
                got += await consumer.poll(1.0)
            except CompressedBodyError as e:
                errors.append(e)
                consumer.seek(MessageQueue("Broken", cluster.broker.config.broker_name, e.message.queue_id),
                              e.message.queue_offset + 1)  # fmt: skip
        assert sorted(m.uniq_key for m in got) == ["ID-after", "ID-before", "ID-other-queue"]
        assert all(m.body == CONTENT for m in got)
        assert sorted(e.message.uniq_key for e in errors) == ["ID-bad", "ID-unknown-type"]
        said = "\n".join(str(e) for e in errors)
        why = "has a body that does not decompress"
        assert f"message ID-bad (Broken queue 0 offset 1) {why}: corrupt ZSTD body" in said
        assert f"message ID-unknown-type (Broken queue 1 offset 1) {why}: unknown compression type 5" in said

    pushed = []

    async def listener(messages) -> bool:
        pushed.extend(m.uniq_key for m in messages)
        return True

    caplog.set_level(logging.WARNING, logger="ferrymq.client.puller")
    await start_consumer("push-broken", "Broken", listener, consume_from="first")
    readable = {"ID-before", "ID-after", "ID-other-queue"}
    await eventually(lambda: readable <= set(pushed), what="the readable messages, past the unreadable")
    assert sorted(pushed) == sorted(readable)  # nothing undecodable handed to the listener
    await eventually(lambda: "ID-bad" in caplog.text and "ID-unknown-type" in caplog.text, what="warnings")
    assert "dead-letter queue of group push-broken" in caplog.text
    async with Admin(cluster.namesrv_addr) as admin:  # the unreadable ones wait in the DLQ, as stored
        dead = decode_records(await pull_answer(cluster, admin, "%DLQ%push-broken", 0))
    assert sorted((m.uniq_key, m.sys_flag, m.body) for m in dead) == [
        ("ID-bad", 0x201, lz4_body),
        ("ID-unknown-type", 0x501, lz4_body),
    ]

    async with Admin(cluster.namesrv_addr) as admin:
        with pytest.raises(ProtocolError, match=r"message ID-bad .*corrupt ZSTD body"):
            await admin.view_message(bad_id)
        [traced] = await trace_lookup(admin.instance, cluster.broker_addr, "Broken", "k-bad")
        assert (traced.body, traced.sys_flag) == (lz4_body, 0x201)  # found, left as stored
        answer = await pull_answer(cluster, admin, "Broken", 0)
    with pytest.raises(MessageDecodeError, match=r"message ID-bad \(Broken queue 0 offset 1\).*corrupt ZSTD"):
        rows.records_to_batch([answer], "broker-a")

    code, _, err = await ferrymq_admin(cluster, "message", bad_id)
    assert code != 0 and "Traceback" not in err
    assert "Error: message ID-bad (Broken queue 0 offset 1) has a body that does not decompress" in err
