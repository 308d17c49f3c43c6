"""SIGTERM stops a broker process cleanly: it exits 0 with a clean-shutdown store (no abort marker),
and every message it acknowledged, even while producers kept sending into the stop, is there after
a restart."""

from __future__ import annotations

import asyncio
import re
import signal

from ferrymq.bench.processes import Proc, free_ports
from ferrymq.client import Message, Producer, PullConsumer, SendError
from ferrymq.client.instance import ClientError
from ferrymq.net import RemotingError
from tests.metrics.conftest import eventually, http_get

TOPIC = "StopTopic"


async def start_broker(proc: Proc, since: int) -> str:
    """Start it; the base URL of its metrics server."""
    proc.start()
    await proc.wait_for_line("; metrics on http", 60, since)  # the start-up line, once all is up
    found = re.search(r"metrics on (http://\S+)/metrics", proc.log_text()[since:])
    assert found, proc.log_text()
    return found.group(1)


async def test_sigterm_loses_nothing_acknowledged(tmp_path):
    namesrv_port, broker_port = free_ports(2)
    namesrv_addr = f"127.0.0.1:{namesrv_port}"
    namesrv = Proc("namesrv", ["namesrv", "--listen", namesrv_addr, "--metrics-port", "-1"], tmp_path, {}, [])
    broker = Proc(
        "broker",
        ["broker", "--namesrv", namesrv_addr, "--listen", f"127.0.0.1:{broker_port}", "--ha-port", "0",
         "--store-dir", str(tmp_path / "store"), "--metrics-port", "0"],
        tmp_path, {}, [],
    )  # fmt: skip
    namesrv.start()
    try:
        await namesrv.wait_for_line("listening on", 60)
        base = await start_broker(broker, 0)

        async def ready():
            return (await http_get(base + "/health/ready"))[0] == 200

        await eventually(ready, 60, "the broker to be ready")
        acked: set[bytes] = set()
        async with Producer("StopProducers", namesrv_addr, retry_times_when_send_failed=0) as producer:

            async def send_until_refused(worker: int) -> None:
                for i in range(100_000):
                    body = b"%d-%d" % (worker, i)
                    try:
                        await producer.send(Message(TOPIC, body))
                    except (SendError, ClientError, RemotingError, OSError, TimeoutError):
                        return
                    acked.add(body)

            senders = [asyncio.create_task(send_until_refused(w)) for w in range(4)]

            async def some_acked():
                return len(acked) >= 500

            await eventually(some_acked, 60, "500 acknowledged sends")
            broker.signal(signal.SIGTERM)
            exit_code = await asyncio.to_thread(broker.popen.wait, 30)  # type: ignore[union-attr]
            await asyncio.wait_for(asyncio.gather(*senders), 30)
        assert exit_code == 0, broker.log_text()[-3000:]
        log = broker.log_text()
        assert "Broker stopping ..." in log and "Broker stopped." in log
        assert not (tmp_path / "store" / "abort").exists()  # a clean stop: no recovery scan next time

        since = len(log)
        await start_broker(broker, since)
        got: set[bytes] = set()
        async with PullConsumer("StopReaders", namesrv_addr, consume_from="first") as consumer:
            await consumer.subscribe(TOPIC)

            async def read_all():
                got.update(m.body for m in await consumer.poll(timeout=1.0))
                return acked <= got

            await eventually(read_all, 60, f"all {len(acked)} acknowledged messages after the restart")
    finally:
        broker.stop()
        namesrv.stop()
