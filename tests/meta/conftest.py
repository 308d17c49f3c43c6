"""A fresh metadata store per test, on SQLite and on the machine's PostgreSQL (a database of its own,
made for the test session and dropped at its end)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from ferrymq.meta import schema
from ferrymq.meta.database import database_url, make_engine
from ferrymq.meta.store import MetaStore

POSTGRES = os.environ.get("FERRYMQ_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of a database made for this session on the local PostgreSQL."""
    psycopg = pytest.importorskip("psycopg")
    admin = POSTGRES.replace("postgresql+psycopg://", "postgresql://") + "/postgres"
    name = f"ferrymq_meta_test_{uuid.uuid4().hex[:12]}"
    try:
        conn = psycopg.connect(admin, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {POSTGRES}: {exc}")
    with conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"{POSTGRES}/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A database URL with empty tables: a SQLite file, or the session's PostgreSQL database."""
    if request.param == "sqlite":
        return database_url(tmp_path)
    url: str = request.getfixturevalue("postgres_url")
    engine = make_engine(url)
    schema.metadata.drop_all(engine)
    engine.dispose()
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[MetaStore]:
    """A store with RabbitMQ's defaults (vhost "/", user guest)."""
    made = MetaStore(make_engine(store_url))
    made.ensure_defaults()
    yield made
    made.engine.dispose()
