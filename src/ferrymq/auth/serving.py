"""Wire authentication into a remoting server (broker and NameServer alike)."""

from __future__ import annotations

import logging
from pathlib import Path

from ferrymq.auth import persist
from ferrymq.auth.gate import RemotingGate
from ferrymq.auth.processor import AuthAdminProcessor
from ferrymq.auth.registry import AuthRegistry
from ferrymq.protocol.acl_signing import Credentials

log = logging.getLogger(__name__)


def serve_auth(
    server, path: Path | None, *, enabled: bool, init_username: str = "", init_password: str = ""
) -> AuthRegistry:
    """Load the users and rules kept at ``path`` (None: in memory only), create the first super
    user, answer the AUTH_* requests on ``server``, and check every request when ``enabled``."""
    registry = AuthRegistry()
    if path is not None:
        persist.load(registry, path)

    def save() -> None:
        if path is not None:
            persist.save(registry, path)

    if registry.ensure_super_user(init_username, init_password):
        log.info("created the first super user %s", init_username)
        save()
    AuthAdminProcessor(registry, save).register(server)
    if enabled:
        if not registry.users:
            log.warning("authentication is on but no user exists: every request will be refused")
        server.set_guard(RemotingGate(registry))
    return registry


def inner_credentials(access_key: str, secret_key: str) -> Credentials | None:
    """What a server signs its own requests to other nodes with, if it has credentials."""
    return Credentials(access_key, secret_key) if access_key and secret_key else None
