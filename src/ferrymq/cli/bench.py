"""`ferrymq bench ...`: benchmarks with a progress bar and one JSON result line per scenario."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from ferrymq.bench.machine import machine_info


@click.group()
def bench() -> None:
    """Measure ferrymq's throughput, latency and recovery time."""


def _save(path: Path | None, suite: str, params: dict, results: list[dict]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "suite": suite,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "params": params,
        "results": results,
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")


def _table(title: str, results: list[dict]) -> Table:
    columns = list(dict.fromkeys(k for r in results for k in r))
    table = Table(title=title)
    for c in columns:
        table.add_column(c, justify="left" if c == "scenario" else "right")
    for r in results:
        table.add_row(*(str(r.get(c, "")) for c in columns))
    return table


@contextlib.contextmanager
def _progress_bar() -> Iterator[Callable[[str, int, int], None]]:
    """A progress callback `(name, done, total)` drawing one bar per name on stderr."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    ) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(name: str, done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=total)
            bar.update(tasks[name], completed=min(done, total), total=total)

        yield progress


@bench.command("store")
@click.option("--count", default=200_000, show_default=True, help="Messages per append/read scenario.")
@click.option("--body-size", default=1024, show_default=True, help="Body size in bytes.")
@click.option(
    "--recovery-gib", default=1.0, show_default=True, help="CommitLog GiB for the recovery test (0: skip)."
)
@click.option("--repeat", default=3, show_default=True, help="Runs per scenario; the median is reported.")
@click.option("--save", type=click.Path(path_type=Path), help="Also write the results as JSON to this file.")
def bench_store(count: int, body_size: int, recovery_gib: float, repeat: int, save: Path | None) -> None:
    """The storage engine alone: appends (single/batched, async/sync flush), reads, recovery."""
    from ferrymq.bench.store import run_store_bench

    with _progress_bar() as progress:
        results = run_store_bench(count, body_size, recovery_gib, repeat, progress)
    Console(stderr=True, width=200).print(_table("ferrymq bench store", results))
    for r in results:
        click.echo(json.dumps(r))
    params = {"count": count, "body_size": body_size, "recovery_gib": recovery_gib, "repeat": repeat}
    _save(save, "store", params, results)


def _client_bench(
    suite: str, run, save: Path | None, params: dict, *, proxy: bool = False,
    auth: tuple[str, str] | None = None,
) -> None:  # fmt: skip
    """Run one SDK scenario under a progress bar on the cluster from --namesrv (or a fresh one);
    with `proxy`, a fresh one with its gRPC proxy, whose address `run` gets after the NameServer's;
    with `params["tls"]`, over TLS (`run` gets the cluster's ClientTLS as its `tls`); with `auth`, a
    fresh one with authentication on and that super user."""
    import asyncio

    from ferrymq.bench.client import CpuMeter, cluster
    from ferrymq.cli.serving import quiet_gc
    from ferrymq.net import install_uvloop

    install_uvloop()
    quiet_gc()
    with (
        cluster(
            None if proxy or auth else params.get("namesrv"),
            proxy=proxy,
            tls=params.get("tls", False),
            auth=auth,
            flush=params.get("flush", "ASYNC_FLUSH"),
        ) as target,  # fmt: skip
        _progress_bar() as progress,
    ):
        meter = lambda: CpuMeter(target.broker_pid)  # noqa: E731
        args = (target.namesrv, target.proxy) if proxy else (target.namesrv,)
        more = {"tls": target.tls} if params.get("tls") else {}
        result = asyncio.run(run(*args, progress, meter, **more))
    if "flush" in params and target.broker_pid is not None:  # a cluster started here, as asked
        result["flush_disk_type"] = params["flush"]
    click.echo(json.dumps(result))
    _save(save, suite, params, [result])


_namesrv = click.option("--namesrv", help="Cluster to measure; default: start a throwaway `ferrymq dev`.")
_body = click.option("--body-size", default=1024, show_default=True)
_save_opt = click.option(
    "--save", type=click.Path(path_type=Path), help="Also write the result as JSON here."
)
_flush = click.option(
    "--flush",
    type=click.Choice(["ASYNC_FLUSH", "SYNC_FLUSH"]),
    default="ASYNC_FLUSH",
    show_default=True,
    help="The fresh cluster's flush_disk_type (SYNC_FLUSH: a send is acknowledged once fdatasync'd); "
    "with --namesrv, the cluster's own applies.",
)


@bench.command("produce")
@_namesrv
@click.option("--topic", default=None, help="Default: a new topic per run.")
@click.option("--count", default=200_000, show_default=True)
@_body
@click.option("--batch", default=32, show_default=True, help="Messages per request (1: one send each).")
@click.option("--inflight", default=8, show_default=True, help="Requests in flight at once.")
@click.option("--trace", is_flag=True, help="Enable message trace on the producer (its cost is the point).")
@click.option("--tls", is_flag=True,
              help="Over TLS (a fresh cluster: permissive, with a throwaway certificate; --namesrv: the "
                   "system's trusted roots).")  # fmt: skip
@click.option(
    "--acl", is_flag=True, help="A fresh cluster with authentication on; the producer signs every request."
)
@_flush
@_save_opt
def bench_produce(namesrv, topic, count, body_size, batch, inflight, trace, tls, acl, flush, save) -> None:
    """Produce with acknowledgements through the SDK."""
    from ferrymq.bench.client import produce

    topic = topic or f"BenchProduce{time.time_ns()}"
    params = {
        "namesrv": namesrv,
        "count": count,
        "body_size": body_size,
        "batch": batch,
        "inflight": inflight,
        "trace": trace,
        "tls": tls,
        "acl": acl,
        "flush": flush,
    }
    credentials = ("bench", "bench-secret") if acl else None
    _client_bench(
        "produce",
        lambda ns, progress, meter, **more: produce(
            ns,
            topic,
            count,
            body_size,
            batch,
            inflight,
            progress,
            meter(),
            trace,
            credentials=credentials,
            **more,
        ),
        save,
        params,
        auth=credentials,
    )


@bench.command("transactions")
@_namesrv
@click.option("--count", default=50_000, show_default=True)
@_body
@click.option("--inflight", default=64, show_default=True, help="Transactions in flight at once.")
@_save_opt
def bench_transactions(namesrv, count, body_size, inflight, save) -> None:
    """Transactional send + commit (half message, local transaction, END_TRANSACTION) through the SDK."""
    from ferrymq.bench.client import transactions

    topic = f"BenchTx{time.time_ns()}"
    params = {"namesrv": namesrv, "count": count, "body_size": body_size, "inflight": inflight}
    _client_bench(
        "transactions",
        lambda ns, progress, meter: transactions(ns, topic, count, body_size, inflight, progress, meter()),
        save,
        params,
    )


@bench.command("consume")
@_namesrv
@click.option("--count", default=200_000, show_default=True)
@_body
@_save_opt
def bench_consume(namesrv, count, body_size, save) -> None:
    """Load messages, then consume them all with one PullConsumer."""
    from ferrymq.bench.client import consume

    topic = f"BenchConsume{time.time_ns()}"
    params = {"namesrv": namesrv, "count": count, "body_size": body_size}
    _client_bench(
        "consume",
        lambda ns, progress, meter: consume(ns, topic, count, body_size, progress, meter),
        save,
        params,
    )


@bench.command("pop")
@_namesrv
@click.option("--count", default=200_000, show_default=True)
@_body
@click.option("--inflight", default=2, show_default=True, help="Pops (pulls) in flight at once.")
@_save_opt
def bench_pop(namesrv, count, body_size, inflight, save) -> None:
    """One pop consumer (batches of 32, one batch ack each), then a pull consumer, on the same
    messages: msg/s and the broker's CPU per message of each."""
    from ferrymq.bench.pop import pop_vs_pull

    params = {"namesrv": namesrv, "count": count, "body_size": body_size, "inflight": inflight}
    _client_bench(
        "pop",
        lambda ns, progress, meter: pop_vs_pull(ns, count, body_size, inflight, progress, meter),
        save,
        params,
    )


@bench.command("pop-redelivery")
@_namesrv
@click.option("--count", default=10_000, show_default=True)
@click.option("--invisible-ms", default=3000, show_default=True, help="Invisible time of the pops.")
@_save_opt
def bench_pop_redelivery(namesrv, count, invisible_ms, save) -> None:
    """Pop COUNT messages without acking; how late each reappears after its invisible time (p50/p99)."""
    from ferrymq.bench.pop import redelivery

    params = {"namesrv": namesrv, "count": count, "invisible_ms": invisible_ms}
    _client_bench(
        "pop-redelivery",
        lambda ns, progress, meter: redelivery(ns, count, invisible_ms, progress, meter),
        save,
        params,
    )


@bench.command("proxy")
@click.option("--count", default=200_000, show_default=True)
@_body
@click.option("--batch", default=32, show_default=True, help="Messages per send request.")
@click.option("--inflight", default=8, show_default=True, help="Requests in flight, each side.")
@_save_opt
def bench_proxy(count, body_size, batch, inflight, save) -> None:
    """The same produce and pop-consume traffic through the gRPC proxy and over remoting, in one run."""
    from ferrymq.bench.proxy import proxy_vs_remoting

    params = {"count": count, "body_size": body_size, "batch": batch, "inflight": inflight}
    _client_bench(
        "proxy",
        lambda ns, proxy, progress, meter: proxy_vs_remoting(
            ns, proxy, count, body_size, batch, inflight, progress, meter
        ),
        save,
        params,
        proxy=True,
    )


@bench.command("e2e")
@_namesrv
@click.option("--rate", default=5000, show_default=True, help="Messages per second.")
@click.option("--duration", default=10.0, show_default=True, help="Seconds of sending.")
@_body
@_flush
@_save_opt
def bench_e2e(namesrv, rate, duration, body_size, flush, save) -> None:
    """End-to-end latency (send to receive) at a fixed rate: p50/p90/p99/p999."""
    from ferrymq.bench.client import end_to_end

    topic = f"BenchE2E{time.time_ns()}"
    params = {"namesrv": namesrv, "rate": rate, "duration": duration, "body_size": body_size, "flush": flush}
    _client_bench(
        "e2e",
        lambda ns, progress, meter: end_to_end(ns, topic, rate, duration, body_size, progress, meter()),
        save,
        params,
    )


@bench.command("idle")
@_namesrv
@click.option("--consumers", default=100, show_default=True)
@click.option("--seconds", default=20.0, show_default=True)
@_save_opt
def bench_idle(namesrv, consumers, seconds, save) -> None:
    """The broker's CPU while CONSUMERS long polls wait on an empty queue (should be ~0)."""
    from ferrymq.bench.client import idle_polls

    params = {"namesrv": namesrv, "consumers": consumers, "seconds": seconds}
    _client_bench(
        "idle", lambda ns, progress, meter: idle_polls(ns, consumers, seconds, progress, meter), save, params
    )


@bench.command("replication")
@click.option("--count", default=100_000, show_default=True)
@_body
@click.option("--batch", default=1, show_default=True, help="Messages per request (1: one send each).")
@click.option("--inflight", default=16, show_default=True, help="Requests in flight at once.")
@click.option("--rounds", default=1, show_default=True, help="Rounds of the three scenarios, alternating; "
              "the figures are each scenario's median.")  # fmt: skip
@_save_opt
def bench_replication(count, body_size, batch, inflight, rounds, save) -> None:
    """Produce throughput of a lone broker vs ASYNC_MASTER and SYNC_MASTER with a slave (own processes)."""
    import asyncio

    from ferrymq.bench.replication import run_replication_bench
    from ferrymq.net import install_uvloop

    install_uvloop()
    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as bar:  # fmt: skip
        task = bar.add_task("produce", total=count)
        summary, runs = asyncio.run(
            run_replication_bench(
                count, body_size, batch, inflight, rounds,
                lambda _, done, total: bar.update(task, completed=done),
            )
        )  # fmt: skip
    console.print(_table("replication (each scenario's median run)", summary))
    params = {"count": count, "body_size": body_size, "batch": batch, "inflight": inflight, "rounds": rounds}
    _save(save, "replication", params, [*summary, *runs])


@bench.command("failover")
@click.option(
    "--trials", default=20, show_default=True, help="Clusters started, each losing its master once."
)
@click.option("--work-dir", type=click.Path(path_type=Path, file_okay=False), default=Path("failover-bench"),
              show_default=True, help="Where the trial clusters keep their stores and logs.")  # fmt: skip
@click.option("--save", type=click.Path(path_type=Path), help="Also write the results as JSON to this file.")
def bench_failover(trials: int, work_dir: Path, save: Path | None) -> None:
    """Controller mode: SIGKILL a 3-replica group's master under steady sends; time until sends succeed."""
    import asyncio
    import shutil

    from ferrymq.bench.failover import run_failover_bench
    from ferrymq.net import install_uvloop

    install_uvloop()
    console = Console(stderr=True)
    shutil.rmtree(work_dir, ignore_errors=True)

    def progress(done: int, result: dict) -> None:
        console.print(f"trial {done}/{trials}: {result}")

    outcome = asyncio.run(run_failover_bench(work_dir, trials, progress))
    Console().print(_table("failover (master SIGKILL → sends succeed again)", [outcome["summary"]]))
    _save(save, "failover", {"trials": trials}, [outcome["summary"], *outcome["trials"]])
    click.echo(json.dumps(outcome["summary"]))


@bench.command("timer")
@_namesrv
@click.option("--pending", default=100_000, show_default=True, help="Delivery-time messages to schedule.")
@click.option("--spread", default=20, show_default=True, help="Seconds their due times are spread over.")
@click.option("--idle-seconds", default=10.0, show_default=True, help="CPU measured while all are pending.")
@click.option("--inflight", default=64, show_default=True, help="Sends in flight while loading.")
@_save_opt
def bench_timer(namesrv, pending, spread, idle_seconds, inflight, save) -> None:
    """Delivery-time messages: punctuality with many pending, and the broker's CPU while they wait."""
    from ferrymq.bench.schedule import timer_bench

    params = {"namesrv": namesrv, "pending": pending, "spread": spread, "idle_seconds": idle_seconds,
              "inflight": inflight}  # fmt: skip
    _client_bench(
        "timer",
        lambda ns, progress, meter: timer_bench(ns, pending, spread, idle_seconds, inflight, progress, meter),
        save,
        params,
    )


@bench.command("pull")
@click.option("--messages", default=40_000, show_default=True, help="Messages loaded (over 4 queues).")
@click.option("--body-size", default=256, show_default=True)
@click.option("--rounds", default=3, show_default=True, help="Times every queue is read through.")
@click.option("--save", type=click.Path(path_type=Path), help="Also write the results as JSON to this file.")
def bench_pull(messages: int, body_size: int, rounds: int, save: Path | None) -> None:
    """The broker's CPU per pull: plain, tag filter, SQL92 filter, consumption control."""
    import asyncio

    from ferrymq.bench.pull import pull_bench

    with _progress_bar() as progress:
        results = asyncio.run(pull_bench(messages, body_size, rounds, progress))
    Console(stderr=True, width=200).print(_table("ferrymq bench pull", results))
    for r in results:
        click.echo(json.dumps(r))
    _save(save, "pull", {"messages": messages, "body_size": body_size, "rounds": rounds}, results)
