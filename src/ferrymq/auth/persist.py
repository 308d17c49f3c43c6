"""Keep an AuthRegistry in a JSON file: written atomically after each change, read at start."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ferrymq.auth.model import AuthModelError
from ferrymq.auth.registry import AuthRegistry
from ferrymq.store.files import atomic_write, durable_copies

log = logging.getLogger(__name__)

FILE_NAME = "auth.json"


def load(registry: AuthRegistry, path: Path) -> None:
    """Fill ``registry`` from ``path`` (or its backup when the main copy is damaged); a missing file
    leaves it empty."""
    for candidate, data in durable_copies(path):
        try:
            registry.restore(json.loads(data))
            return
        except (ValueError, AuthModelError) as e:
            log.error("%s is damaged (%s); trying its backup", candidate, e)


def save(registry: AuthRegistry, path: Path) -> None:
    """Write the registry; the file holds secret keys, so only its owner may read it."""
    atomic_write(path, json.dumps(registry.snapshot(), indent=1, sort_keys=True).encode())
    os.chmod(path, 0o600)
