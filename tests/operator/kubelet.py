"""A stand-in for the kubelet and the StatefulSet controller, for end-to-end runs of the operator
against the fake API server: every pod of the StatefulSets it is given charge of is a real
`ferrymq` process.

Each pod gets its own network namespace on a bridge (root only; ferrymq.bench.processes.Network),
so its IP is its own and it listens on the ports the operator rendered (9876, 5556, ...) without
touching the host's. The container's env is resolved as the kubelet does (downward API for the pod
IP and name, `$(VAR)` in args and values), its /data volume is a directory of its own, and the pod
is Ready while its readiness probe (HTTP GET of the probe's path and port at the pod IP) answers 200.
Pods start and are probed side by side, as a kubelet's per-pod workers do (one slow pod delays no
other), each at its probe's initialDelaySeconds and then every periodSeconds; one failed probe
makes a pod unready (failureThreshold is not counted).
Cluster DNS for pods is a hosts file per namespace (`ip netns exec` mounts /etc/netns/<ns>/hosts
over /etc/hosts) naming every pod `<pod>.<service>.<namespace>.svc`, as a headless Service does.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ferrymq.bench.processes import Network, Proc
from ferrymq.operator.pods import DATA_PATH
from tests.operator.fakeapi import FakeApi

Obj = dict[str, Any]
NETNS_ETC = Path("/etc/netns")
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _expand(text: str, env: dict[str, str]) -> str:
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), text)


def _template_key(sts: Obj) -> str:
    return json.dumps(sts["spec"]["template"], sort_keys=True)


class Pod:
    """One pod: its slot on the bridge, its process, and the readiness last reported."""

    def __init__(self, name: str, slot: int, ip: str, proc: Proc, probe: Obj | None, template: str) -> None:
        self.name, self.slot, self.ip, self.proc, self.probe = name, slot, ip, proc, probe
        self.template = template  # the pod template it was started from, to see a rolling update
        self.reported: tuple[str, bool] | None = None
        self.next_probe = time.monotonic() + float((probe or {}).get("initialDelaySeconds", 0))
        self.last_probe = False  # what the readiness probe said last time

    def probe_now(self) -> None:
        """Run the readiness probe, and set when it runs next (periodSeconds, 10 by default)."""
        self.next_probe = time.monotonic() + float((self.probe or {}).get("periodSeconds", 10))
        self.last_probe = self.ready()

    def ready(self) -> bool:
        if not self.proc.running:
            return False
        get = (self.probe or {}).get("httpGet")
        if get is None:
            return True
        try:
            url = f"http://{self.ip}:{get['port']}{get['path']}"
            with urllib.request.urlopen(url, timeout=1) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False


class Kubelet:
    """Runs, in a thread, the pods of the namespace's StatefulSets whose component is in `components`."""

    def __init__(self, api: FakeApi, workdir: Path, components: set[str], slots: int = 4) -> None:
        self.api, self.workdir, self.components = api, workdir, components
        self.network = Network(slots)
        self.network.setup()
        self.dns: dict[str, str] = {}  # pod DNS name → pod IP
        self._made_etc = not NETNS_ETC.exists()
        self._write_hosts()
        self.free = list(range(slots))
        self.pods: dict[str, Pod] = {}
        self._stop = threading.Event()
        self._probes = ThreadPoolExecutor(slots, thread_name_prefix="probe")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.errors: list[str] = []
        self._deleted: list[str] = []  # pods "deleted" by a test, killed at the next pass
        self._held: set[str] = set()  # deleted pods not to be started again yet
        self._slots_held: dict[str, int] = {}  # deleted pod → its network slot, for its return
        self._lock = threading.Lock()
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.sync()
            except Exception as e:  # keep playing; the test sees the error
                self.errors.append(repr(e))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(20)
        self._probes.shutdown()
        for pod in self.pods.values():
            pod.proc.stop()
        self.network.teardown()
        for ns in self.network.names:
            shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
        if self._made_etc:
            with contextlib.suppress(OSError):  # not empty: a kubelet of another test process uses it
                NETNS_ETC.rmdir()

    def delete_pod(self, name: str, *, held: bool = False) -> None:
        """`kubectl delete pod --grace-period=0`: the container is SIGKILLed and the StatefulSet
        controller starts it again under the same name, address and storage — `held`: only once
        `release(name)` is called (its node is gone meanwhile)."""
        with self._lock:
            self._deleted.append(name)
            if held:
                self._held.add(name)

    def release(self, name: str) -> None:
        """A held pod may be started again (its node is back)."""
        with self._lock:
            self._held.discard(name)

    def _write_hosts(self) -> None:
        """Every namespace's /etc/hosts, rewritten in place (the mounted inode must stay the same)."""
        text = "127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in sorted(self.dns.items()))
        for ns in self.network.names:
            (NETNS_ETC / ns).mkdir(parents=True, exist_ok=True)
            with open(NETNS_ETC / ns / "hosts", "w") as f:
                f.write(text)

    def _core(self) -> str:
        return f"/api/v1/namespaces/{self.api.namespace}"

    def sync(self) -> None:
        """One pass: start missing pods, stop surplus ones, report readiness."""
        apps = f"/apis/apps/v1/namespaces/{self.api.namespace}/statefulsets"
        wanted: dict[str, tuple[Obj, int]] = {}
        for sts in self.api.items(apps):
            labels = sts["spec"]["template"]["metadata"]["labels"]
            if labels.get("app.kubernetes.io/component") in self.components:
                for i in range(int(sts["spec"]["replicas"])):
                    wanted[f"{sts['metadata']['name']}-{i}"] = (sts, i)
        with self._lock:
            deleted, self._deleted = self._deleted, []
            held = set(self._held)
        for name in deleted:
            pod = self.pods.pop(name)
            pod.proc.kill()
            self.api.request("DELETE", f"{self._core()}/pods/{name}")
            self._slots_held[name] = pod.slot
        for name in [n for n in self.pods if n not in wanted]:
            self._remove(name)
        started = []
        for name, (sts, _) in wanted.items():
            if name in self.pods and self.pods[name].template != _template_key(sts):
                self._restart(name, sts)  # the StatefulSet's template changed: a rolling update
                started.append((name, sts))
            if name not in self.pods and name not in held:
                self._start(name, sts, self._slots_held.pop(name, None))  # a deleted pod keeps its address
                started.append((name, sts))
        for name, sts in started:  # every container first, then the API objects: pods start side by side
            self._publish(name, sts)
        now = time.monotonic()  # pods whose probe is due, probed side by side (a kubelet's per-pod workers)
        list(self._probes.map(Pod.probe_now, [p for p in self.pods.values() if p.next_probe <= now]))
        for pod in self.pods.values():
            self._report(pod, pod.last_probe and pod.proc.running)
        for sts in {id(s): s for s, _ in wanted.values()}.values():
            self._report_statefulset(sts)

    def _report_statefulset(self, sts: Obj) -> None:
        """The StatefulSet controller's part: how many of its pods run the current template and are ready."""
        mine = [p for n, p in self.pods.items() if n.rsplit("-", 1)[0] == sts["metadata"]["name"]]
        ready = [p for p in mine if p.reported == ("Running", True)]
        status = {
            "observedGeneration": sts["metadata"].get("generation", 1),
            "replicas": len(mine),
            "readyReplicas": len(ready),
            "updatedReplicas": sum(p.template == _template_key(sts) for p in ready),
        }
        if {k: (sts.get("status") or {}).get(k) for k in status} != status:
            path = (
                f"/apis/apps/v1/namespaces/{self.api.namespace}/statefulsets/{sts['metadata']['name']}/status"
            )
            self.api.patch(path, {"status": status})

    def _restart(self, name: str, sts: Obj) -> None:
        pod = self.pods.pop(name)
        pod.proc.stop()
        self._start(name, sts, pod.slot)

    def _start(self, name: str, sts: Obj, slot: int | None = None) -> None:
        if slot is None:
            if not self.free:
                raise RuntimeError(f"no network slot left for pod {name}")
            slot = self.free.pop(0)
        ip = self.network.address(slot)
        service = f"{name}.{sts['spec']['serviceName']}.{self.api.namespace}.svc"
        self.dns.update({service: ip, f"{service}.cluster.local": ip})
        self._write_hosts()
        template = sts["spec"]["template"]
        (container,) = template["spec"]["containers"]
        data = self.workdir / name
        data.mkdir(parents=True, exist_ok=True)
        env: dict[str, str] = {}
        for item in container.get("env") or []:
            field = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            value = {"status.podIP": ip, "metadata.name": name}.get(field or "", item.get("value") or "")
            env[item["name"]] = _expand(value, env).replace(DATA_PATH, str(data))
        assert container["command"] == ["ferrymq"], container["command"]
        args = [_expand(a, env).replace(DATA_PATH, str(data)) for a in container["args"]]
        proc = Proc(name, args, self.workdir, env, self.network.prefix(slot))
        proc.start()
        self.pods[name] = Pod(name, slot, ip, proc, container.get("readinessProbe"), _template_key(sts))

    def _publish(self, name: str, sts: Obj) -> None:
        """The Pod object of a pod just started, unless one is there from before a restart."""
        template = sts["spec"]["template"]
        body = {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
                "metadata": {"name": name, "labels": template["metadata"]["labels"]}}  # fmt: skip
        if self.api.get(f"{self._core()}/pods/{name}") is None:
            self.api.create(body, f"{self._core()}/pods")

    def _remove(self, name: str) -> None:
        pod = self.pods.pop(name)
        pod.proc.stop()
        self.free.append(pod.slot)
        self.api.request("DELETE", f"{self._core()}/pods/{name}")

    def _report(self, pod: Pod, ready: bool) -> None:
        phase = "Running" if pod.proc.running else "Failed"
        if pod.reported == (phase, ready):
            return
        status = {"phase": phase, "podIP": pod.ip,
                  "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}  # fmt: skip
        self.api.patch(f"{self._core()}/pods/{pod.name}/status", {"status": status})
        pod.reported = (phase, ready)
