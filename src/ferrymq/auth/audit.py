"""The audit trail: every refused request and every change of users or rules, on ``ferrymq.audit``.

Lines say who (the AccessKey), what (request code, resource, change) and from where (peer address).
Secrets never appear: users are logged without their password and signatures are not logged.
"""

from __future__ import annotations

import logging

log = logging.getLogger("ferrymq.audit")


def _clean(text: str | None, limit: int = 200) -> str:
    """Peer-given text on one line: control characters escaped (no forged log lines), length capped."""
    if not text:
        return "-"
    return text[:limit].encode("unicode_escape").decode("ascii")


def refused(who: str | None, what: str, source: str, reason: str) -> None:
    """``what``: ``code=<remoting request code>`` or ``rpc=<gRPC method>``."""
    log.warning("refused user=%s %s from=%s: %s", _clean(who, 64), what, source, _clean(reason))


def changed(who: str | None, what: str, target: str, source: str) -> None:
    log.info("change user=%s %s %s from=%s", _clean(who, 64), what, _clean(target, 2000), source)
