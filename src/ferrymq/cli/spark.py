"""`ferrymq spark ...`: the Spark jobs (extra [spark]), on local[*] or any Spark master."""

from __future__ import annotations

import re

import click


def job_session(master: str | None, app: str):
    try:
        from ferrymq.spark import spark_session
    except ImportError:
        raise click.ClickException("the Spark jobs need PySpark: pip install 'ferrymq[spark]'") from None
    return spark_session(master, app, {"spark.ui.showConsoleProgress": "false"})


def job_error(e: Exception) -> click.ClickException:
    """Spark wraps errors raised in its Python workers in a JVM stack trace: show ours alone."""
    found = re.search(r"ferrymq\.spark\.errors\.\w+: (.*)", str(e))
    return click.ClickException(found[1] if found else str(e).strip().splitlines()[0])


def echo_err(line: str) -> None:
    click.echo(line, err=True)


master_option = click.option("--master", help="Spark master URL (default local[*], or spark-submit's).")
namesrv_option = click.option(
    "--namesrv", default="127.0.0.1:9876", show_default=True, help="NameServer address(es)."
)


@click.group()
def spark() -> None:
    """Data pipeline jobs on Apache Spark: trace analytics and topic replay."""


@spark.command()
@namesrv_option
@click.option(
    "--topic", required=True, help="Topic to copy from (e.g. %DLQ%MyGroup to redrive dead letters)."
)
@click.option("--to-topic", required=True, help="Topic to copy to.")
@click.option("--to-namesrv", help="NameServer of the target cluster (default: the source's).")
@click.option("--from-offsets", help='"earliest" (default) or per-queue JSON {"Topic": {"broker-a:0": 42}}.')
@click.option("--to-offsets", help='"latest" (default) or per-queue JSON; the end offsets are excluded.')
@click.option("--from-time", help="Start at the first message stored at or after this time (ms or ISO-8601).")
@click.option("--to-time", help="Stop before the first message stored at or after this time.")
@master_option
def replay(
    namesrv, topic, to_topic, to_namesrv, from_offsets, to_offsets, from_time, to_time, master
) -> None:
    """Copy TOPIC's messages in an offset or time range to TO_TOPIC, here or on another cluster."""
    from ferrymq.spark.replay import replay_counted, source_frame

    session = job_session(master, f"ferrymq replay {topic} -> {to_topic}")
    messages = source_frame(
        session, namesrv, topic, startingOffsets=from_offsets, endingOffsets=to_offsets,
        startingTimestamp=from_time, endingTimestamp=to_time,
    )  # fmt: skip
    try:
        count = replay_counted(session, messages, to_namesrv or namesrv, to_topic, echo_err)
    except Exception as e:
        raise job_error(e) from None
    click.echo(f"replayed {count} messages from {topic} to {to_topic}")


@spark.command("trace-report")
@namesrv_option
@click.option(
    "--out", required=True, type=click.Path(file_okay=False), help="Directory for Parquet and HTML."
)
@click.option("--trace-topic", default="RMQ_SYS_TRACE_TOPIC", show_default=True)
@click.option("--from-time", help="Only trace messages stored at or after this time (ms or ISO-8601).")
@click.option("--to-time", help="Only trace messages stored before this time.")
@master_option
def trace_report(namesrv, out, trace_topic, from_time, to_time, master) -> None:
    """Message trace analytics: latency percentiles, throughput, retries and dead letters per topic
    and group, as Parquet tables and OUT/report.html."""
    from pathlib import Path

    from ferrymq.spark.trace_report import run

    session = job_session(master, "ferrymq trace-report")
    try:
        report = run(session, namesrv, Path(out), trace_topic,
                     startingTimestamp=from_time, endingTimestamp=to_time)  # fmt: skip
    except Exception as e:
        raise job_error(e) from None
    records = sum(report.records.values())
    click.echo(
        f"{records} trace records, {len(report.latency)} topic/group pairs: {Path(out) / 'report.html'}"
    )
