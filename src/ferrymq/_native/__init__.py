"""Optional C accelerators for per-record loops, each with a pure-Python twin that stays the reference.

``load("name")`` returns the compiled module ``ferrymq._native.name``, or None when it was not built
(no compiler) or when ``FERRYMQ_PURE_PYTHON=1`` asks for the Python paths (tests run both).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def load(name: str) -> ModuleType | None:
    if os.environ.get("FERRYMQ_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(f"ferrymq._native.{name}")
    except ImportError:
        return None
