"""Subscription expressions: which tags a consumer wants, as the hashes the ConsumeQueue stores."""

from __future__ import annotations

from ferrymq.protocol.message import java_hash

TAG_TYPE = "TAG"


class FilterError(ValueError):
    """An expression the broker cannot evaluate."""


def tag_codes(expression: str | None, expression_type: str | None = TAG_TYPE) -> frozenset[int] | None:
    """Hashes of the tags in `"TagA || TagB"`; None for every message (`*` or empty)."""
    if expression_type and expression_type.upper() != TAG_TYPE:
        raise FilterError(f"{expression_type} filtering is not supported by this broker yet; use TAG")
    if expression is None or expression.strip() in ("", "*"):
        return None
    tags = [t.strip() for t in expression.split("||")]
    if any(not t for t in tags):
        raise FilterError(f"bad tag expression {expression!r}: empty tag between ||")
    return frozenset(java_hash(t) for t in tags)
