"""The audit trail: every refused request and every change of users or rules, on ``ferrymq.audit``.

Lines say who (the AccessKey), what (request code, resource, change) and from where (peer address).
Secrets never appear: users are logged without their password and signatures are not logged.
"""

from __future__ import annotations

import logging

log = logging.getLogger("ferrymq.audit")


def refused(who: str | None, what: str, source: str, reason: str) -> None:
    """``what``: ``code=<remoting request code>`` or ``rpc=<gRPC method>``."""
    log.warning("refused user=%s %s from=%s: %s", who or "-", what, source, reason)


def changed(who: str | None, what: str, target: str, source: str) -> None:
    log.info("change user=%s %s %s from=%s", who or "-", what, target, source)
