"""Optional C accelerators for per-record loops, each with a pure-Python twin that stays the reference.

``load("name")`` returns the compiled module ``ferrymq._native.name``, or None when it was not built
(no compiler) or when ``FERRYMQ_PURE_PYTHON=1`` asks for the Python paths (tests run both).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

# one per _native/*.c
ACCELERATORS = ("batch", "fsync", "hmac", "index", "pop", "put", "records", "remoting", "rows", "scan")


def _pure() -> bool:
    return os.environ.get("FERRYMQ_PURE_PYTHON", "") not in ("", "0")


def load(name: str) -> ModuleType | None:
    if _pure():
        return None
    try:
        return importlib.import_module(f"ferrymq._native.{name}")
    except ImportError:
        return None


def status() -> str:
    """The start-up line every server prints: whether its per-record loops run in C."""
    if _pure():
        return "C accelerators: off (FERRYMQ_PURE_PYTHON is set): the Python loops run"
    missing = [name for name in ACCELERATORS if load(name) is None]
    if not missing:
        return f"C accelerators: loaded ({', '.join(ACCELERATORS)})"
    return (
        f"C accelerators: {', '.join(missing)} not built (no C compiler at install?): "
        "their Python loops run, slower"
    )
