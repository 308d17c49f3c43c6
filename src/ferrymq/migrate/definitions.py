"""RabbitMQ's definitions (vhosts, users with their password hashes, permissions, policies, exchanges,
queues, bindings) from where they can be had, and into the metadata service the gateway reads:
`rabbitmqctl export_definitions -` on RabbitMQ's own machine (no plugin needed), the management HTTP
API's GET /api/definitions, or a JSON file exported earlier."""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from ferrymq.meta.client import MetaClient
from ferrymq.meta.definitions import ImportReport
from ferrymq.meta.service import MetaService

EXPORT_TIMEOUT_S = 120.0
SKIPPED_QUEUE_TYPES = ("stream",)  # a stream is a log, read by offset: nothing to drain


class DefinitionsError(Exception):
    """The definitions could not be had or taken."""


def _parse(text: str, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise DefinitionsError(f"{where} is not definitions JSON: {e}") from None
    if not isinstance(doc, dict) or not any(k in doc for k in ("queues", "exchanges", "users", "vhosts")):
        raise DefinitionsError(f"{where} is not RabbitMQ definitions (no queues, exchanges, users or vhosts)")
    return doc


def from_file(path: Path) -> dict[str, Any]:
    try:
        return _parse(path.read_text(), str(path))
    except OSError as e:
        raise DefinitionsError(f"cannot read {path}: {e.strerror}") from None


def from_rabbitmqctl(rabbitmqctl: str = "rabbitmqctl") -> dict[str, Any]:
    """The definitions of the RabbitMQ node on this machine."""
    found = shutil.which(rabbitmqctl)
    if found is None:
        raise DefinitionsError(
            f"'{rabbitmqctl}' is not on PATH: give --management-url or --definitions FILE instead"
        )
    try:
        done = subprocess.run(
            [found, "export_definitions", "-"],
            capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise DefinitionsError(f"rabbitmqctl export_definitions took over {EXPORT_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        raise DefinitionsError(f"rabbitmqctl export_definitions failed: {done.stderr.strip()[-500:]}")
    return _parse(done.stdout, "rabbitmqctl export_definitions")


def from_management(base_url: str, username: str, password: str) -> dict[str, Any]:
    """GET <base_url>/api/definitions with basic auth (the rabbitmq_management plugin)."""
    url = base_url.rstrip("/") + "/api/definitions"
    request = urllib.request.Request(url)
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=EXPORT_TIMEOUT_S) as response:
            return _parse(response.read().decode(), url)
    except urllib.error.HTTPError as e:
        raise DefinitionsError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise DefinitionsError(f"cannot reach {url}: {getattr(e, 'reason', e)}") from None


def queues_to_drain(doc: dict[str, Any], vhost: str) -> tuple[list[str], list[str]]:
    """(queues of `vhost` to drain, why others are left) from the definitions."""
    drain, left = [], []
    for q in doc.get("queues", []):
        if q.get("vhost") != vhost:
            continue
        kind = q.get("type") or (q.get("arguments") or {}).get("x-queue-type", "classic")
        if kind in SKIPPED_QUEUE_TYPES:
            left.append(f"queue '{q['name']}' is a {kind}: not drained (read it by offset)")
            continue
        drain.append(q["name"])
    return drain, left


async def import_into(doc: dict[str, Any], meta: str | None, meta_database: str | None) -> ImportReport:
    """Import `doc` into the metadata service at host:port (`meta`), or straight into the database a
    gateway's metadata lives in (`meta_database`, a SQLAlchemy URL)."""
    from sqlalchemy.exc import SQLAlchemyError

    async with metadata(meta, meta_database) as service:
        try:
            return await service.import_definitions(doc)
        except OSError as e:
            raise DefinitionsError(f"cannot reach the metadata service at {meta}: {e}") from None
        except SQLAlchemyError as e:
            raise DefinitionsError(f"importing into {meta_database} failed: {e}") from None


@contextlib.asynccontextmanager
async def metadata(meta: str | None, meta_database: str | None) -> AsyncIterator[MetaClient | MetaService]:
    """The gateway's metadata: its service at host:port (`meta`), or the database it lives in
    (`meta_database`, a SQLAlchemy URL)."""
    if meta:
        async with MetaClient(meta) as client:
            yield client
        return
    if not meta_database:
        raise DefinitionsError("say where the gateway's metadata is: --meta host:port or --meta-database URL")
    from sqlalchemy.exc import SQLAlchemyError

    from ferrymq.meta.database import make_engine
    from ferrymq.meta.store import MetaStore

    try:
        store = MetaStore(make_engine(meta_database))
        store.ensure_defaults()
    except (SQLAlchemyError, ValueError) as e:
        raise DefinitionsError(f"cannot open {meta_database}: {e}") from None
    try:
        yield MetaService(store)
    finally:
        store.engine.dispose()
