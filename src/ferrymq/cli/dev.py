"""`ferrymq dev`: a local single-machine cluster on an embedded data directory.

It grows with the roles: today it opens (and, after a crash, recovers) the storage engine in the
data directory and keeps its flush, checkpoint and retention services running until Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ferrymq.store import MessageStore, StoreConfig, StoreError


def default_data_dir() -> Path:
    """./.ferrymq/data when the current directory is writable, else ~/.ferrymq/data."""
    here = Path.cwd()
    return (here if os.access(here, os.W_OK) else Path.home()) / ".ferrymq" / "data"


@click.command()
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=default_data_dir,
    show_default="./.ferrymq/data",
    help="Where the cluster keeps its data.",
)
def dev(data_dir: Path) -> None:
    """Start a local development cluster on DATA_DIR; stop it cleanly with Ctrl-C."""
    console = Console()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    config = StoreConfig(store_path_root_dir=data_dir / "store", mapped_file_size_commit_log=256 << 20)
    try:
        store = MessageStore(config).open()
    except StoreError as e:
        raise click.ClickException(str(e)) from None
    try:
        console.print(_summary(store))
        console.print(f"data directory: {store.root}", soft_wrap=True)  # whole, for copy and paste
        console.print("[bold green]ferrymq dev is running.[/] Press Ctrl-C to stop.")
        stop.wait()
        console.print("stopping: flushing and writing the checkpoint ...")
    finally:
        store.close()
    console.print("stopped cleanly.")


def _summary(store: MessageStore) -> Table:
    cl = store.commitlog
    table = Table(title="ferrymq dev", show_header=False)
    table.add_row("CommitLog", f"{len(cl.segments)} segment(s), offsets {cl.min_offset}..{cl.max_offset}")
    table.add_row("topics", ", ".join(sorted(store.topics())) or "(none yet)")
    table.add_row("recovery", f"{store.recovered_bytes} bytes replayed in {store.recovery_seconds:.2f} s")
    table.add_row("flush", store.config.flush_disk_type)
    return table
