"""The Kubernetes operator end to end, timed: the operator (`ferrymq operator`, its own process)
against the tests' in-memory API server, with the tests' stand-in kubelet running every pod as a
real ferrymq process in a network namespace of its own (root only; tests/operator/kubelet.py).

  startup   apply a NameService of 3, a Controller of 3 and a CONTROLLER-mode Broker of 2 groups ×
            3 members; time until every pod is Running and Ready and a send succeeds on every
            broker group (target <= 10 s). Repeated --trials times, a fresh cluster each.
  transfer  a producer at --rate msg/s and a push consumer on topic Orders of cluster src; a
            TopicTransfer moves it and its group to cluster dst. Every acknowledged send must be
            consumed (on either cluster): lost = acknowledged - consumed (target 0); writes paused =
            the longest time without a successful send (target <= 5 s).

The stand-in kubelet probes readiness as a kubelet does, every periodSeconds of the rendered probe.
Everything (API server, operator, kubelet, every pod) shares this machine's cores, where a cluster
spreads pods over nodes: read the figures beside the load they were taken at.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.operator.fakeapi import FakeApi
from tests.operator.helpers import API, NS, condition, create
from tests.operator.kubelet import Kubelet
from tests.operator.traffic import Traffic, committed, writable_on

from ferrymq.bench.machine import machine_info
from ferrymq.bench.processes import free_port, netns_available
from ferrymq.client.message import Message
from ferrymq.client.producer import Producer
from ferrymq.client.push_consumer import PushConsumer

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a running process (and its reaped children)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / TICKS


class Cluster:
    """A fake API server, the operator process and the kubelet, stopped in reverse by close()."""

    def __init__(self, workdir: Path, slots: int, resync: float | None) -> None:
        self.api = FakeApi(NS)
        kubeconfig = self.api.kubeconfig(workdir / "kubeconfig")
        port = free_port()
        args = [sys.executable, "-m", "ferrymq", "operator", "-n", NS, "--image", "ferrymq/ferrymq:bench",
                "--liveness", f"http://127.0.0.1:{port}/healthz"]  # fmt: skip
        if resync is not None:
            args += ["--resync", str(resync)]
        self.log = open(workdir / "operator.log", "w")  # noqa: SIM115 (closed by close())
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        self.operator = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.kubelet: Kubelet | None = None
        wait("the operator's liveness endpoint", lambda: _answers(f"http://127.0.0.1:{port}/healthz"), 60)
        self.kubelet = Kubelet(self.api, workdir / "pods", components={"nameservice", "controller", "broker"},
                               slots=slots)  # fmt: skip

    def pod_cpu(self, prefix: str = "") -> float:
        assert self.kubelet is not None
        return sum(cpu_seconds(p.proc.pid) for n, p in self.kubelet.pods.items() if n.startswith(prefix))

    def operator_cpu(self) -> float:
        return cpu_seconds(self.operator.pid)

    def close(self) -> None:
        if self.kubelet is not None:
            self.kubelet.close()
        self.operator.terminate()
        try:
            self.operator.wait(20)
        except subprocess.TimeoutExpired:
            self.operator.kill()
            self.operator.wait()
        self.log.close()
        self.api.close()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def wait(what: str, probe: Callable[[], Any], timeout: float) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := probe():
            return value
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


def ready(api: FakeApi, kind: str, name: str) -> bool:
    return (condition(api, kind, name) or {}).get("status") == "True"


def name_servers(api: FakeApi) -> str:
    ips = ((api.get(f"{API}/nameservices/ns") or {}).get("status") or {}).get("nameServers") or []
    return ";".join(f"{ip}:9876" for ip in ips)


async def send_to_each(namesrv: str, topic: str, groups: set[str], deadline: float) -> None:
    """One acknowledged send on every broker group in `groups`."""
    producer = Producer("startup-bench", namesrv, retry_times_when_send_failed=0)
    await producer.start()
    try:
        for group in sorted(groups):

            def pick(queues, message, arg, group=group):  # type: ignore[no-untyped-def]
                return next(q for q in queues if q.broker_name == group)

            while True:
                try:
                    await producer.send(Message(topic, b"hello"), selector=pick)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
    finally:
        await producer.shutdown()


# --- startup -------------------------------------------------------------------------------------


def startup_trial(workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    members = args.groups * (args.replica_per_group + 1)
    pods = 3 + 3 + members
    cluster = Cluster(workdir, pods, args.resync)
    assert cluster.kubelet is not None
    node = cluster.kubelet
    marks: dict[str, float] = {}
    try:
        started = time.monotonic()
        create(cluster.api, "NameService", "ns", {"size": 3})
        create(cluster.api, "Controller", "ctl", {"size": 3})
        broker = {"size": args.groups, "replicaPerGroup": args.replica_per_group, "clusterMode": "CONTROLLER"}
        create(cluster.api, "Broker", "broker", broker)
        deadline = started + args.timeout

        def watch() -> bool:
            now = time.monotonic() - started
            for name, pod in list(node.pods.items()):
                marks.setdefault(f"{name} started", now)
                if pod.reported == ("Running", True):
                    marks.setdefault(f"{name} ready", now)
            for mark, done in (
                ("NameService status has addresses", lambda: name_servers(cluster.api)),
                ("Controller Ready", lambda: ready(cluster.api, "Controller", "ctl")),
            ):
                if mark not in marks and done():  # asked until seen, to load the API server little
                    marks[mark] = now
            return len(node.pods) == pods and all(p.reported == ("Running", True) for p in node.pods.values())

        pods_ready: float | None = None
        serving: float | None = None
        error = None
        try:  # a trial that does not serve within --timeout is recorded as such
            wait("every pod Running and Ready", watch, args.timeout)
            pods_ready = round(time.monotonic() - started, 2)
            namesrv = name_servers(cluster.api)
            groups = {f"broker-{g}" for g in range(args.groups)}
            asyncio.run(writable_on(namesrv, "Startup", "broker", groups, 2, deadline))
            asyncio.run(send_to_each(namesrv, "Startup", groups, deadline))
            serving = round(time.monotonic() - started, 2)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        return {
            "seconds": serving,
            "error": error,
            "pods_ready_seconds": pods_ready,
            "pods": pods,
            "marks": {k: round(v, 2) for k, v in sorted(marks.items(), key=lambda kv: kv[1])},
            "pod_cpu_seconds": round(cluster.pod_cpu(), 2),
            "operator_cpu_seconds": round(cluster.operator_cpu(), 2),
            "kubelet_errors": node.errors,
        }
    finally:
        cluster.close()


Trial = Callable[[Path, argparse.Namespace], dict[str, Any]]


def repeat(trial: Trial, args: argparse.Namespace, describe: Callable[[dict[str, Any]], str]) -> list[dict]:
    """`args.trials` runs of `trial`, each on a fresh cluster in a directory of its own."""
    trials = []
    for i in range(args.trials):
        load = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="opbench-") as tmp:
            result = trial(Path(tmp), args)
        result["load_before"] = round(load, 2)
        trials.append(result)
        print(f"trial {i + 1}: {describe(result)}, load {load:.2f}", flush=True)
    return trials


def startup(args: argparse.Namespace) -> dict[str, Any]:
    trials = repeat(
        startup_trial, args, lambda t: f"{t['seconds']} s to serving (pods ready {t['pods_ready_seconds']} s)"
    )
    seconds = [t["seconds"] for t in trials if t["seconds"] is not None]
    return {
        "p50_seconds": statistics.median(seconds) if seconds else None,
        "max_seconds": max(seconds) if len(seconds) == len(trials) else None,  # None: one never served
        "failed_trials": len(trials) - len(seconds),
        "trials": trials,
    }


# --- transfer ------------------------------------------------------------------------------------


async def transfer_run(cluster: Cluster, args: argparse.Namespace) -> dict[str, Any]:
    api = cluster.api
    namesrv = name_servers(api)
    await writable_on(namesrv, "Orders", "src", {"src-0"}, 4, time.monotonic() + 60)
    traffic = Traffic("Orders", args.rate)
    consumer = PushConsumer("billing", namesrv)
    consumer.subscribe("Orders", "*", traffic.listener)
    await consumer.start()
    producer = Producer("transfer-bench", namesrv)
    await producer.start()
    cpu_self, cpu_src, cpu_dst = time.process_time(), cluster.pod_cpu("src-"), cluster.pod_cpu("dst-")
    produced = asyncio.create_task(traffic.produce(producer))
    steps: dict[str, float] = {}
    try:
        await committed(namesrv, "billing", "Orders", 60)  # a group is moved once it committed there
        await asyncio.sleep(args.warmup)
        applied = time.monotonic()
        # Calls of the API server run in threads: blocking the loop would stall the producer too.
        move = {"topic": "Orders", "sourceCluster": "src", "targetCluster": "dst"}
        await asyncio.to_thread(create, api, "TopicTransfer", "move", move)
        while True:
            st = ((await asyncio.to_thread(api.get, f"{API}/topictransfers/move")) or {}).get("status") or {}
            label = f"{st.get('phase')}/{st.get('step')}"
            steps.setdefault(label, round(time.monotonic() - applied, 2))
            if st.get("phase") in ("Succeeded", "RolledBack", "Failed"):
                break
            if time.monotonic() - applied > args.timeout:
                raise TimeoutError(f"transfer still {label}: {st.get('message')}")
            await asyncio.sleep(0.1)
        done = time.monotonic()
        await asyncio.sleep(args.after)
        traffic.stop.set()
        await produced
        stopped = time.monotonic()
        await traffic.consumed_all(args.drain)
    finally:
        traffic.stop.set()
        await producer.shutdown()
        await consumer.shutdown()
    cpu_self = time.process_time() - cpu_self
    cpu_src, cpu_dst = cluster.pod_cpu("src-") - cpu_src, cluster.pod_cpu("dst-") - cpu_dst
    lost = traffic.lost()
    gap, gap_at = traffic.longest_gap(applied, done)
    acked = len(traffic.acked)
    return {
        "phase": st.get("phase"),
        "transfer_seconds": round(done - applied, 2),
        "steps_seen_at": steps,
        "acknowledged": acked,
        "acknowledged_by": dict(traffic.acked_on),
        "consumed_from": dict(traffic.consumed_from),
        "send_failures": traffic.failed,
        "consumed_unique": len(traffic.consumed),
        "lost": len(lost),
        "lost_sample": sorted(b.decode() for b in lost)[:10],
        "redelivered": sum(n - 1 for n in traffic.consumed.values()),
        "writes_paused_seconds": round(gap, 3),
        "pause_starts_after_apply_seconds": round(gap_at, 2),
        "sent_per_second": round(acked / (stopped - (applied - args.warmup)), 1),
        "us_per_msg": {
            "client_process": round(cpu_self * 1e6 / max(acked, 1), 1),
            "brokers_src": round(cpu_src * 1e6 / max(acked, 1), 1),
            "brokers_dst": round(cpu_dst * 1e6 / max(acked, 1), 1),
        },
    }


def transfer_trial(workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    cluster = Cluster(workdir, 3, args.resync)
    try:
        create(cluster.api, "NameService", "ns", {"size": 1})
        for name in ("src", "dst"):
            create(cluster.api, "Broker", name, {"size": 1})
        for name in ("src", "dst"):
            wait(f"Broker {name} Ready", lambda n=name: ready(cluster.api, "Broker", n), 120)
        result = asyncio.run(transfer_run(cluster, args))
        result["operator_cpu_seconds"] = round(cluster.operator_cpu(), 2)
        assert cluster.kubelet is not None
        result["kubelet_errors"] = cluster.kubelet.errors
        return result
    finally:
        cluster.close()


def transfer(args: argparse.Namespace) -> dict[str, Any]:
    trials = repeat(transfer_trial, args,
                    lambda t: f"{t['phase']} in {t['transfer_seconds']} s, {t['acknowledged']} acknowledged, "
                              f"{t['lost']} lost, writes paused {t['writes_paused_seconds']} s")  # fmt: skip
    return {
        "lost_total": sum(t["lost"] for t in trials),
        "writes_paused_max_seconds": max(t["writes_paused_seconds"] for t in trials),
        "writes_paused_p50_seconds": statistics.median(t["writes_paused_seconds"] for t in trials),
        "trials": trials,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("scenario", choices=("startup", "transfer"))
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--resync", type=float, help="the operator's --resync (default: its own default)")
    parser.add_argument("--timeout", type=float, default=120.0, help="s allowed for a start-up or a transfer")
    parser.add_argument("--groups", type=int, default=2, help="startup: broker groups")
    parser.add_argument("--replica-per-group", type=int, default=2,
                        help="startup: replicaPerGroup (CONTROLLER mode: members = this + 1)")  # fmt: skip
    parser.add_argument("--rate", type=int, default=1000, help="transfer: msg/s sent")
    parser.add_argument(
        "--warmup", type=float, default=3.0, help="transfer: s of traffic before the transfer"
    )
    parser.add_argument("--after", type=float, default=3.0, help="transfer: s of traffic after it succeeded")
    parser.add_argument("--drain", type=float, default=30.0, help="transfer: s allowed to consume the rest")
    parser.add_argument("--save", type=Path)
    args = parser.parse_args()
    available, why = netns_available()
    if not available:
        sys.exit(f"cannot run: {why}")
    load = os.getloadavg()
    result = {"scenario": args.scenario, "params": vars(args) | {"save": str(args.save)},
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_before": load}  # fmt: skip
    result |= startup(args) if args.scenario == "startup" else transfer(args)
    result["machine"] = machine_info()
    text = json.dumps(result, indent=2)
    print(text if args.save is None else {k: v for k, v in result.items() if k != "trials"})
    if args.save is not None:
        args.save.write_text(text + "\n")


if __name__ == "__main__":
    main()
