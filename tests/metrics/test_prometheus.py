"""A real Prometheus scrapes every role of a running cluster (NameServer, broker, controller and gRPC
proxy, each its own process) every second, and answers produce throughput and consumer lag in PromQL
through its HTTP API."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.bench.processes import Proc, free_ports
from ferrymq.bench.prometheus import Prometheus, Unavailable
from ferrymq.client import Message, Producer, PullConsumer
from tests.metrics.conftest import eventually, http_get

TOPIC, GROUP = "PromTopic", "PromGroup"


async def test_prometheus_answers_throughput_and_lag(tmp_path):
    ns, broker_port, raft, ctl, proxy_port, *metrics = free_ports(9)
    namesrv_addr = f"127.0.0.1:{ns}"
    roles = {
        "namesrv": ["namesrv", "--listen", namesrv_addr],
        "broker": ["broker", "--namesrv", namesrv_addr, "--listen", f"127.0.0.1:{broker_port}",
                   "--ha-port", "0", "--store-dir", str(tmp_path / "store")],
        "controller": ["controller", "--id", "n1", "--peers", f"n1@127.0.0.1:{raft}", "--listen",
                       f"127.0.0.1:{ctl}", "--data-dir", str(tmp_path / "controller")],
        "proxy": ["proxy", "--namesrv", namesrv_addr, "--listen", f"127.0.0.1:{proxy_port}"],
    }  # fmt: skip
    procs = [
        Proc(role, [*args, "--metrics-port", str(port)], tmp_path, {}, [])
        for (role, args), port in zip(roles.items(), metrics, strict=False)
    ]
    prometheus = None
    try:
        for proc in procs:
            proc.start()
        for proc in procs:
            await proc.wait_for_line("listening on", 60)
        targets = [f"127.0.0.1:{port}" for port in metrics[: len(procs)]]
        for target in targets:

            async def ready(target=target):
                return (await http_get(f"http://{target}/health/ready"))[0] == 200

            await eventually(ready, 60, f"{target} to be ready")
        try:
            prometheus = Prometheus(tmp_path / "prometheus", targets)
        except Unavailable as e:
            pytest.skip(str(e))
        await asyncio.to_thread(prometheus.wait_ready)

        async def query(promql: str) -> float | None:
            return await asyncio.to_thread(prometheus.scalar, promql)

        async def all_up():
            return await query('sum(up{job="ferrymq"})') == len(targets)

        await eventually(all_up, 60, "every role scraped")

        sent = 0
        async with Producer("PromProducers", namesrv_addr) as producer:
            loop = asyncio.get_running_loop()
            until = loop.time() + 5  # several scrapes' worth of produce traffic
            while loop.time() < until:
                await producer.send_batch([Message(TOPIC, b"x" * 100) for _ in range(10)])
                sent += 10
                await asyncio.sleep(0.01)
        rate = await query(f'sum(rate(rocketmq_messages_in_total{{topic="{TOPIC}"}}[30s]))')
        assert rate is not None and rate > 0

        async def counted():
            return await query(f'sum(rocketmq_messages_in_total{{topic="{TOPIC}"}})') == sent

        await eventually(counted, 30, f"Prometheus to count {sent} messages in")
        bytes_rate = await query(f'sum(rate(rocketmq_throughput_in_total{{topic="{TOPIC}"}}[30s]))')
        assert bytes_rate is not None and bytes_rate > 100 * rate

        async with PullConsumer(GROUP, namesrv_addr, consume_from="first") as consumer:
            await consumer.subscribe(TOPIC)
            consumed = 0
            while consumed < 100:
                consumed += len(await consumer.poll(timeout=2.0))
            await consumer.commit()
        lag = f'sum(rocketmq_consumer_lag_messages{{consumer_group="{GROUP}",topic="{TOPIC}"}})'
        diff = f'sum(rocketmq_group_diff{{group="{GROUP}",topic="{TOPIC}"}})'

        async def lag_seen():
            return await query(lag) == sent - consumed and await query(diff) == sent - consumed

        await eventually(lag_seen, 30, f"a lag of {sent - consumed} in Prometheus")
        for role in ("namesrv", "broker"):
            assert await query(f'sum(rocketmq_rpc_latency_count{{node_type="{role}"}})') > 0
        assert await query('sum(rocketmq_proxy_up{node_type="proxy"})') == 1
        assert await query('sum(ferrymq_controller_is_leader{node_type="controller"})') == 1
    finally:
        if prometheus is not None:
            prometheus.stop()
        for proc in reversed(procs):
            proc.stop()
