"""A real Prometheus server for tests and benchmarks: Debian's package, installed when missing, run as
our own process on a free loopback port with its own configuration and data directory.

Installing the package may start Debian's own prometheus service (on :9090). Only a prometheus
process that appeared during our install is stopped (and its service disabled); one that was
running before is none of our business.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from ferrymq.bench.debian import Unavailable, installed
from ferrymq.bench.processes import free_port

__all__ = ["Prometheus", "Unavailable", "prometheus_binary"]


def _prometheus_pids() -> set[int]:
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "prometheus":
                    pids.add(int(entry.name))
            except OSError:
                continue
    return pids


def prometheus_binary() -> str:
    """The prometheus executable; installs Debian's package first when it is missing (as root)."""
    found = shutil.which("prometheus")
    if found:
        return found
    before = _prometheus_pids()
    found = installed("prometheus", "prometheus")
    started_by_install = _prometheus_pids() - before
    if started_by_install:  # Debian's service, started by the package's postinst: stop and disable it
        for tool in (["service", "prometheus", "stop"], ["update-rc.d", "prometheus", "disable"]):
            if shutil.which(tool[0]):
                subprocess.run(tool, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        for pid in started_by_install & _prometheus_pids():
            os.kill(pid, 15)
    return found


class Prometheus:
    """Our own prometheus process scraping `targets` every second."""

    def __init__(self, workdir: Path, targets: list[str]) -> None:
        binary = prometheus_binary()
        self.port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = config = workdir / "prometheus.yml"
        self._write_config(targets)
        self.log = open(workdir / "prometheus.log", "w")  # noqa: SIM115  (closed in stop)
        self.process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def _write_config(self, targets: list[str]) -> None:
        self.config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: ferrymq\n    static_configs:\n"
            f"      - targets: {json.dumps(targets)}\n"
        )

    def retarget(self, targets: list[str], timeout: float = 30.0) -> None:
        """Scrape `targets` from now on (none: stop scraping); returns once each was scraped."""
        self._write_config(targets)
        self.process.send_signal(signal.SIGHUP)  # prometheus reloads its configuration
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            active = self._get("/api/v1/targets")["data"]["activeTargets"]
            up = sorted(t["labels"]["instance"] for t in active if t["health"] == "up")
            if up == sorted(targets) and len(active) == len(targets):
                return
            time.sleep(0.2)
        raise TimeoutError(f"prometheus did not switch to scraping {targets}")

    def _get(self, path: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as answer:
            return json.loads(answer.read())

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited; see {self.log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError("prometheus did not become ready")

    def query(self, promql: str) -> list[dict]:
        """The result vector of an instant PromQL query through the HTTP API."""
        answer = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        if answer.get("status") != "success":
            raise RuntimeError(f"query {promql!r} failed: {answer}")
        return answer["data"]["result"]

    def scalar(self, promql: str) -> float | None:
        """The single value of a query that sums to one series; None when it has none (yet)."""
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
