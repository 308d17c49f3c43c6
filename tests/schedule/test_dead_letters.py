"""Dead letters listed and re-sent, by the SDK Admin and by `ferrymq admin dlq`, against a real broker."""

from __future__ import annotations

import asyncio
import sys

import pytest

from ferrymq.client import Admin, Message
from ferrymq.client.instance import ClientError
from ferrymq.protocol.codes import RequestCode, ResponseCode

from .conftest import collect


async def _dead_letter(cluster, producer, topic: str, group: str, bodies: list[bytes]) -> None:
    """Store `bodies` in `topic` and dead-letter each for `group` (negative delay level: at once)."""
    for body in bodies:
        await producer.send(Message(topic, body, tags="T", keys=body.decode(), properties={"color": "red"}))
    for _, m in await collect(cluster.namesrv_addr, topic, len(bodies)):
        ext = {"offset": m.commitlog_offset, "group": group, "delayLevel": -1}
        assert (await cluster.call(RequestCode.CONSUMER_SEND_MSG_BACK, ext)).code == ResponseCode.SUCCESS


async def test_dead_letters_are_listed_and_resent_to_their_topic(cluster, producer):
    await _dead_letter(cluster, producer, "Payments", "billing", [b"a", b"b", b"c"])
    async with Admin(cluster.namesrv_addr) as admin:
        assert await admin.dead_letters("nobody-failed") == []
        letters = await admin.dead_letters("billing")
        assert sorted(m.body for m in letters) == [b"a", b"b", b"c"]
        assert all(m.properties["RETRY_TOPIC"] == "Payments" for m in letters)
        assert len(await admin.dead_letters("billing", limit=2)) == 2
        chosen = next(m for m in letters if m.body == b"b")
        [(resent, result)] = await admin.resend_dead_letters("billing", [chosen.msg_id])
        assert resent.body == b"b" and result.message_queue.topic == "Payments"
        assert result.msg_id == chosen.msg_id
        with pytest.raises(ClientError, match="no dead letter"):
            await admin.resend_dead_letters("billing", ["NOT-AN-ID"])
    got = await collect(cluster.namesrv_addr, "Payments", 3, group="after-resend", total=4)
    again = [m for _, m in got if m.body == b"b"][-1]
    assert again.reconsume_times == 0 and again.tags == "T" and again.keys == ["b"]
    assert again.properties["color"] == "red" and "RETRY_TOPIC" not in again.properties
    assert again.msg_id == chosen.msg_id


async def _ferrymq(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ferrymq", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def test_the_cli_lists_and_resends_dead_letters(cluster, producer):
    await _dead_letter(cluster, producer, "Mail", "mailer", [b"hello", b"world"])
    admin = ("admin", "--namesrv", cluster.namesrv_addr, "dlq")
    code, out, err = await _ferrymq(*admin, "list", "mailer")
    assert code == 0, err
    assert "dead letters of mailer: 2" in out and "Mail" in out and "hello" in out
    code, out, err = await _ferrymq(*admin, "resend", "mailer")
    assert code != 0 and "--msg-id" in err and "Traceback" not in err
    code, out, err = await _ferrymq(*admin, "resend", "mailer", "--all")
    assert code == 0, err
    assert "re-sent 2 dead letter(s) of mailer" in out
    got = await collect(cluster.namesrv_addr, "Mail", 2, group="after-cli", total=4)
    assert sorted(m.body for _, m in got) == [b"hello", b"hello", b"world", b"world"]
