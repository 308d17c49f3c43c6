"""A controller-mode cluster of real processes on this machine, for the fault suite and the failover bench.

One NameServer, three controllers and one broker group of three replicas, each a `ferrymq` process
started (and stopped, SIGKILLed, SIGSTOPped, cut off) by PID. With `netns=True` (root only) every
broker runs in its own network namespace joined to a bridge, so that one can be cut off the network
(its veth goes down) while it keeps running; the other processes listen on the bridge's address.
"""

from __future__ import annotations

import asyncio
import ctypes
import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import msgspec

from ferrymq.net import RemotingClient, RemotingError
from ferrymq.net.controllers import ControllerClient
from ferrymq.protocol.bodies import decode_body
from ferrymq.protocol.codes import RequestCode, ResponseCode
from ferrymq.protocol.controller import BrokerReplicasInfo, ReplicasInfo
from ferrymq.protocol.remoting import RemotingCommand

BROKER_NAME = "broker-a"
CLUSTER = "FaultCluster"


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now and reserved for this process, for a server about to start in another one.

    Picked below the kernel's ephemeral range: outgoing connections take their local ports from that
    range, so none can take this one before the server binds it (as one from bind(0) could be taken,
    now and then). Reserved machine-wide (see `_reserve`): a server restarted on its port later (a
    Raft member after a SIGKILL) finds it still free, though other test runs on the machine pick
    ports from the same range meanwhile, and one run never hands out a port twice."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    for _ in range(200 if ephemeral_low > _LOWEST_PICKED + 1000 else 0):
        port = _PICKER.randrange(_LOWEST_PICKED, ephemeral_low)
        if not _reserve(port):
            continue
        with closing(socket.socket()) as s:
            try:
                s.bind((host, port))
            except OSError:  # taken by something that does not reserve
                os.close(_held.pop(port))
                continue
            _handed.add(port)
            return port
    with closing(socket.socket()) as s:  # no room below the ephemeral range: any free port
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` different free ports (see free_port)."""
    return [free_port(host) for _ in range(count)]


_LOWEST_PICKED = 20000  # above the well-known ports of the services on this machine
_PICKER = random.SystemRandom()
_RESERVATIONS = Path(tempfile.gettempdir()) / "ferrymq-ports"  # a lock file per port any run picked
_HELD_MAX = 128  # locks a process keeps (the oldest go first): a cluster picks a few dozen ports
_held: dict[int, int] = {}  # port -> the descriptor holding its lock, oldest first
_handed: set[int] = set()  # every port this process handed out, never handed out again


def _reserve(port: int) -> bool:
    """Take `port` for this process unless another process (or this one) holds it: an exclusive
    flock on its lock file, held until `_HELD_MAX` newer ports are reserved or the process ends
    (the kernel drops a dead process's locks: nothing stale is left behind). Only so many are held
    since each lock is a descriptor: a test run picks thousands of ports, and descriptors numbered
    past 1024 break select()."""
    if port in _handed:  # every port held was handed out too
        return False
    _RESERVATIONS.mkdir(mode=0o1777, exist_ok=True)
    fd = os.open(_RESERVATIONS / str(port), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _held[port] = fd
    if len(_held) > _HELD_MAX:
        os.close(_held.pop(next(iter(_held))))
    return True


def netns_available() -> tuple[bool, str]:
    """Whether network namespaces can be made here, and why not."""
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    if shutil.which("ip") is None:
        return False, "the ip command (iproute2) is missing"
    return True, ""


def _die_with_parent() -> None:
    """In the child: SIGKILL it when the harness dies, so no cluster outlives a killed run."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Proc:
    """One ferrymq process; its output goes to a log file."""

    def __init__(
        self, name: str, args: list[str], log_dir: Path, env: dict[str, str], prefix: list[str]
    ) -> None:
        self.name = name
        self.args = args
        self.log_path = log_dir / f"{name}.log"
        self.env = env
        self.prefix = prefix
        self.popen: subprocess.Popen | None = None
        self.paused = False

    def start(self) -> None:
        log = open(self.log_path, "a")  # noqa: SIM115  (the child owns it)
        log.write(f"--- start {time.strftime('%H:%M:%S')}\n")
        log.flush()
        self.popen = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "ferrymq", *self.args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
            start_new_session=True,  # Ctrl-C reaches the harness only, which stops them in order
            preexec_fn=_die_with_parent,
        )
        log.close()
        self.paused = False

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.running:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL, and reap."""
        if self.paused:
            self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait(timeout=30)
        self.paused = False

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (a clean stop), SIGKILL if it takes longer than `timeout`."""
        if not self.running:
            return
        if self.paused:
            self.resume()
        self.signal(signal.SIGTERM)
        try:
            assert self.popen is not None
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    async def wait_for_line(self, text: str, timeout: float, since: int = 0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log_text()[since:]:
                return
            if not self.running:
                raise RuntimeError(f"{self.name} exited:\n{self.log_text()[-3000:]}")
            await asyncio.sleep(0.1)
        raise TimeoutError(f"{self.name} did not print {text!r} in {timeout:g} s:\n{self.log_text()[-3000:]}")


class Network:
    """A bridge with one namespace per broker (root only); `cut` takes a broker off the network."""

    def __init__(self, count: int) -> None:
        tag = os.getpid() % 10_000
        self.subnet = f"10.{200 + os.getpid() % 50}.{os.getpid() // 50 % 250}"
        self.bridge = f"fmqbr{tag}"
        self.names = [f"fmq{tag}n{i}" for i in range(count)]
        self.host = f"{self.subnet}.1"

    def address(self, i: int) -> str:
        return f"{self.subnet}.{10 + i}"

    def prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.names[i]]

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)

    def setup(self) -> None:
        self._ip("link", "add", self.bridge, "type", "bridge")
        self._ip("addr", "add", f"{self.host}/24", "dev", self.bridge)
        self._ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.names):
            outer, inner = f"{ns}a", f"{ns}b"
            self._ip("netns", "add", ns)
            self._ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            self._ip("link", "set", inner, "netns", ns)
            self._ip("link", "set", outer, "master", self.bridge)
            self._ip("link", "set", outer, "up")
            self._ip("netns", "exec", ns, "ip", "addr", "add", f"{self.address(i)}/24", "dev", inner)
            self._ip("netns", "exec", ns, "ip", "link", "set", inner, "up")
            self._ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")

    def cut(self, i: int) -> None:
        self._ip("link", "set", f"{self.names[i]}a", "down")

    def heal(self, i: int) -> None:
        self._ip("link", "set", f"{self.names[i]}a", "up")

    def teardown(self) -> None:
        for ns in self.names:
            subprocess.run(["ip", "link", "del", f"{ns}a"], capture_output=True, timeout=10)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=10)


@dataclass
class GroupState:
    """The broker group as the controller leader sees it."""

    master_id: int | None
    master_epoch: int
    sync_state_set: set[int]
    alive: set[int]
    addresses: dict[int, str] = field(default_factory=dict)


def broker_process(workdir: Path, namesrv_port: int, port: int) -> Proc:
    """A Broker child process on loopback, its store under `workdir` (not started yet)."""
    args = ["broker", "--namesrv", f"127.0.0.1:{namesrv_port}", "--listen", f"127.0.0.1:{port}",
            "--store-dir", str(workdir / "store"), "--ha-port", "0"]  # fmt: skip
    return Proc("broker", args, workdir, {}, [])


class ProcessGroup:
    """Processes of one test cluster, by name: started, stopped and asked things by their owner."""

    procs: dict[str, Proc]
    _remoting: RemotingClient | None

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def start_broker(self, name: str, timeout: float = 90) -> None:
        """(Re)start a broker process and wait until it listens."""
        proc = self.procs[name]
        since = len(proc.log_text())
        proc.start()
        await proc.wait_for_line("listening on", timeout, since)

    async def call(self, address: str, code: int, ext: dict[str, str] | None = None) -> RemotingCommand:
        """One request to any process of the cluster."""
        assert self._remoting is not None
        return await self._remoting.invoke(address, RemotingCommand(code, ext_fields=ext or {}), 5.0)

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()


class ProcessCluster(ProcessGroup):
    def __init__(
        self,
        root: Path,
        *,
        replicas: int = 3,
        controllers: int = 3,
        netns: bool = False,
        broker_settings: dict[str, object] | None = None,
        proxy: bool = False,
    ) -> None:
        self.root = root
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.network = Network(replicas) if netns else None
        host = self.network.host if self.network else "127.0.0.1"
        self.host = host
        self.namesrv_addr = f"{host}:{free_port()}"
        raft = {f"n{i + 1}": f"{host}:{free_port()}" for i in range(controllers)}
        peers = ";".join(f"{n}@{a}" for n, a in raft.items())
        self.controller_addrs = {n: f"{host}:{free_port()}" for n in raft}
        self.procs: dict[str, Proc] = {}
        self.procs["namesrv"] = Proc("namesrv", ["namesrv", "--listen", self.namesrv_addr], self.logs, {}, [])
        for node, address in self.controller_addrs.items():
            args = ["controller", "--id", node, "--peers", peers, "--listen", address,
                    "--data-dir", str(root / "controllers" / node), "--scan-interval", "300"]  # fmt: skip
            self.procs[node] = Proc(node, args, self.logs, {}, [])
        settings = {
            "controller_heart_beat_timeout_mills": 4000,  # > 2 × the controllers' 1.4 s election timeout
            "broker_heartbeat_interval": 300,
            "ha_max_time_slave_not_catchup": 3000,
            "all_ack_in_sync_state_set": "true",
            **(broker_settings or {}),
        }
        self.broker_addrs: list[str] = []
        for i in range(replicas):
            broker_host = self.network.address(i) if self.network else host
            address = f"{broker_host}:{free_port()}"
            self.broker_addrs.append(address)
            env = {f"FERRYMQ_{k.upper()}": str(v) for k, v in settings.items()}
            env["FERRYMQ_HA_LISTEN_PORT"] = str(free_port())
            env.update(  # small files: trials and tests must not fill the disk
                FERRYMQ_MAPPED_FILE_SIZE_COMMIT_LOG=str(64 << 20),
                FERRYMQ_MAPPED_FILE_SIZE_CONSUME_QUEUE=str(20_000 * 20),
                FERRYMQ_MAX_HASH_SLOT_NUM="10000",
                FERRYMQ_MAX_INDEX_NUM="100000",
            )
            args = ["broker", "--namesrv", self.namesrv_addr, "--listen", address, "--cluster", CLUSTER,
                    "--name", BROKER_NAME, "--store-dir", str(root / f"broker{i}"),
                    "--controller", self.controller_list]  # fmt: skip
            prefix = self.network.prefix(i) if self.network else []
            self.procs[f"broker{i}"] = Proc(f"broker{i}", args, self.logs, env, prefix)
        # a cluster-mode gRPC proxy in front of them (routes from the NameServer), if asked for
        self.proxy_addr = f"{host}:{free_port()}" if proxy else None
        if self.proxy_addr:
            args = ["proxy", "--namesrv", self.namesrv_addr, "--listen", self.proxy_addr]
            self.procs["proxy"] = Proc("proxy", args, self.logs, {}, [])
        self._remoting: RemotingClient | None = None

    @property
    def controller_list(self) -> str:
        return ";".join(self.controller_addrs.values())

    @property
    def brokers(self) -> list[str]:
        return [n for n in self.procs if n.startswith("broker")]

    async def start(self) -> None:
        if self.network:
            self.network.teardown()  # a run that died may have left it behind
            self.network.setup()
        self._remoting = RemotingClient()
        for name in ["namesrv", *self.controller_addrs]:
            self.procs[name].start()
        await self.procs["namesrv"].wait_for_line("listening", 60)
        for node in self.controller_addrs:
            await self.procs[node].wait_for_line("listening", 60)
        for name in self.brokers:  # one at a time: the first becomes master, deterministically
            await self.start_broker(name)
        if self.proxy_addr:
            self.procs["proxy"].start()
            await self.procs["proxy"].wait_for_line("listening", 60)

    async def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop()
        if self._remoting is not None:
            await self._remoting.close()
        if self.network:
            self.network.teardown()

    async def create_topic(self, topic: str, queues: int = 4, timeout: float = 60.0) -> None:
        """`topic` on every running broker of the group, once the NameServer routes it."""
        fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
                  "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG"}  # fmt: skip
        for name, address in zip(self.brokers, self.broker_addrs, strict=True):
            if self.procs[name].running:
                reply = await self.call(address, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
                if reply.code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"{name} did not create {topic}: {reply.remark}")
        deadline = time.monotonic() + timeout
        while (await self.call(self.namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})).code:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the NameServer does not route {topic} after {timeout:g} s")
            await asyncio.sleep(0.2)

    # --- Looking at it ------------------------------------------------------------------------

    def controllers(self) -> ControllerClient:
        assert self._remoting is not None
        return ControllerClient(list(self.controller_addrs.values()), self._remoting, timeout=2.0)

    async def group(self) -> GroupState | None:
        """The group as the controller leader has it, or None while no leader answers."""
        try:
            response = await self.controllers().invoke(
                RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=msgspec.json.encode([BROKER_NAME])
            )
        except RemotingError:
            return None
        if response.code != ResponseCode.SUCCESS:
            return None
        info: ReplicasInfo | None = decode_body(BrokerReplicasInfo, response.body).replicas_info_table.get(
            BROKER_NAME
        )
        if info is None:
            return None
        members = info.in_sync_replicas + info.not_in_sync_replicas
        return GroupState(
            info.master_broker_id,
            info.master_epoch,
            {r.broker_id for r in info.in_sync_replicas},
            {r.broker_id for r in members if r.alive},
            {r.broker_id: r.broker_address for r in members},
        )

    async def wait_group(self, predicate, timeout: float, what: str) -> GroupState:
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = await self.group()
            if state is not None and predicate(state):
                return state
            await asyncio.sleep(0.2)
        raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}; last seen {state}")

    async def wait_full_group(self, timeout: float) -> GroupState:
        return await self.wait_group(
            lambda s: len(s.sync_state_set) == len(self.brokers), timeout, "a full SyncStateSet"
        )

    async def wait_new_master(self, before: GroupState, timeout: float) -> GroupState:
        """The group once a master other than `before`'s is elected."""
        return await self.wait_group(
            lambda s: s.master_id not in (None, before.master_id),
            timeout,
            f"a master other than {before.master_id}",
        )

    def broker_name_of(self, address: str) -> str:
        return self.brokers[self.broker_addrs.index(address)]

    async def master(self) -> tuple[str, GroupState]:
        """The master's process name, once there is one."""
        state = await self.wait_group(lambda s: s.master_id is not None, 60, "a master")
        assert state.master_id is not None  # what was waited for
        return self.broker_name_of(state.addresses[state.master_id]), state

    async def controller_leader(self) -> str:
        """The name of the controller process that leads now."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for node, address in self.controller_addrs.items():
                if not self.procs[node].running or self.procs[node].paused:
                    continue
                try:
                    meta = await self.controllers().metadata(address)
                except RemotingError:
                    continue
                if meta.is_leader:
                    return node
            await asyncio.sleep(0.2)
        raise TimeoutError("no controller leader")
