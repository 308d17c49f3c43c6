"""Where the metadata lives: a SQLite file under the data directory by default, or any SQLAlchemy URL
(PostgreSQL through psycopg in production: postgresql+psycopg://user@host/db)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event

SQLITE_FILE = "meta.db"


def database_url(data_dir: Path | str) -> str:
    """The SQLite URL of the store in `data_dir` (created if missing)."""
    path = Path(data_dir)
    path.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(path / SQLITE_FILE).resolve()}"


def make_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets WAL (readers never wait for the writer) and a busy timeout."""
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True)
    engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _pragmas(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    return engine
