"""Who may connect and what they may touch: RabbitMQ's password hashes (as its definitions carry
them) and its configure/write/read permission regexes."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re

SHA256 = "rabbit_password_hashing_sha256"
_DIGESTS = {
    SHA256: hashlib.sha256,
    "rabbit_password_hashing_sha512": hashlib.sha512,
    "rabbit_password_hashing_md5": hashlib.md5,
}
_SALT_LENGTH = 4  # RabbitMQ's salt: 4 random bytes in front of the digest


def hash_password(password: str, algorithm: str = SHA256, salt: bytes | None = None) -> str:
    """base64(salt + H(salt + password)), RabbitMQ's stored form."""
    salt = os.urandom(_SALT_LENGTH) if salt is None else salt
    digest = _DIGESTS[algorithm](salt + password.encode()).digest()
    return base64.b64encode(salt + digest).decode()


def verify_password(password: str, password_hash: str, algorithm: str = SHA256) -> bool:
    """Whether a PLAIN password matches a stored hash; an empty hash (a user without password, as
    RabbitMQ allows) matches nothing."""
    if not password_hash or algorithm not in _DIGESTS:
        return False
    try:
        stored = base64.b64decode(password_hash, validate=True)
    except ValueError:
        return False
    salt = stored[:_SALT_LENGTH]
    return hmac.compare_digest(hash_password(password, algorithm, salt), password_hash)


def permits(regex: str, name: str) -> bool:
    """RabbitMQ's test of a resource name against a permission regex: an unanchored search, and the
    empty regex grants nothing."""
    return bool(regex) and re.search(regex, name) is not None
