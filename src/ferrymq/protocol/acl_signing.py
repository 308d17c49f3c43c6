"""RocketMQ's request signatures: remoting (4.x ACL session credentials) and gRPC (5.x ``MQv2``).

Remoting: the client adds ``AccessKey`` (and ``SecurityToken`` if it has one) to the request's
extFields, then signs the values of every extField but ``Signature``, concatenated in the order of
their sorted keys, followed by the body: ``Signature = base64(HMAC-SHA1(secretKey, content))``
(``AclUtils.combineRequestContent`` and ``AclSigner``). Peers older than 4.9.3 leave
``_UNIQUE_KEY_QUERY`` out of the content.

gRPC: ``authorization: MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time,
Signature=<hex>``, the HMAC-SHA1 of the ``x-mq-date-time`` header's value, in hex.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass, field

from ferrymq._native import load
from ferrymq.protocol.remoting import RemotingCommand

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
_UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
_V4_9_3 = 399  # MQVersion ordinal of 4.9.3


def request_content(ext_fields: dict[str, str], body: bytes | memoryview, version: int) -> bytes:
    """The bytes a remoting request's signature covers (for tests and tools; signing does not copy
    the body)."""
    return _fields_content(ext_fields, version) + bytes(body)


def _fields_content(ext_fields: dict[str, str], version: int) -> bytes:
    """The values of every extField but Signature, in the order of the sorted keys, as Java prints
    them (a caller's ints too)."""
    skip = (SIGNATURE, _UNIQUE_KEY_QUERY) if version <= _V4_9_3 else (SIGNATURE,)
    return "".join(str(ext_fields[key]) for key in sorted(ext_fields) if key not in skip).encode()


_BLOCK = 64  # SHA-1's block size


class PySigningKey:
    """HMAC-SHA1 (RFC 2104) keyed with one secret: the inner and outer hashes after their key
    blocks, made once and copied per request (keying anew, or hmac.HMAC's Python wrapper, costs
    more). The reference of the C ``Key`` (ferrymq/_native/hmac.c) that ``SigningKey`` is when it
    is built."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, secret: bytes) -> None:
        if len(secret) > _BLOCK:
            secret = hashlib.sha1(secret).digest()
        secret = secret.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha1(bytes(k ^ 0x36 for k in secret))
        self._outer = hashlib.sha1(bytes(k ^ 0x5C for k in secret))

    def mac(self, content: bytes, body: bytes | memoryview) -> bytes:
        """HMAC-SHA1(secret, content + body)."""
        inner = self._inner.copy()
        inner.update(content)
        if body:
            inner.update(body)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def sign(self, ext_fields: dict[str, str], body: bytes | memoryview, version: int) -> str:
        """The Signature of a remoting request with these extFields and body."""
        digest = self.mac(_fields_content(ext_fields, version), body)
        return binascii.b2a_base64(digest, newline=False).decode()

    def verify(self, ext_fields: dict[str, str], body: bytes | memoryview, version: int) -> bool:
        """Whether the request's own Signature is right (False when it has none)."""
        given = ext_fields.get(SIGNATURE)
        expected = self.sign(ext_fields, body, version)
        try:
            return isinstance(given, str) and hmac.compare_digest(given, expected)
        except TypeError:  # not ASCII: not a base64 signature
            return False


_hmac_c = load("hmac")
SigningKey: Callable[[bytes], PySigningKey] = PySigningKey if _hmac_c is None else _hmac_c.Key
"""``SigningKey(secret_key.encode())``: sign and verify requests with one secret; make it once per
secret (a client per credentials, the server per user)."""


def signature(content: bytes, secret_key: str, body: bytes | memoryview = b"") -> str:
    """base64(HMAC-SHA1(secret_key, content + body)), as RocketMQ's AclSigner computes it."""
    digest = SigningKey(secret_key.encode()).mac(content, body)
    return binascii.b2a_base64(digest, newline=False).decode()


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a client signs with: ``access_key`` names the user, ``secret_key`` is its password."""

    access_key: str
    secret_key: str
    security_token: str = ""

    _key: PySigningKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("credentials need both an access key and a secret key")
        object.__setattr__(self, "_key", SigningKey(self.secret_key.encode()))  # keyed once

    def __repr__(self) -> str:  # the secret never reaches a log through a repr
        return f"Credentials(access_key={self.access_key!r})"

    def sign(self, command: RemotingCommand) -> None:
        """Add AccessKey (and SecurityToken) and the Signature to ``command``'s extFields (an
        earlier Signature is replaced: the signature never covers one)."""
        fields = command.ext_fields
        fields[ACCESS_KEY] = self.access_key
        if self.security_token:
            fields[SECURITY_TOKEN] = self.security_token
        fields[SIGNATURE] = self._key.sign(fields, command.body, command.version)


GRPC_SCHEME = "MQv2-HMAC-SHA1"


def grpc_authorization(header: str) -> tuple[str, str] | None:
    """(access key, hex signature) of a 5.x ``authorization`` header, None when it is not one."""
    scheme, _, rest = header.strip().partition(" ")
    if scheme != GRPC_SCHEME:
        return None
    items = {}
    for part in rest.split(","):
        key, eq, value = part.strip().partition("=")
        if eq:
            items[key] = value.strip()
    access_key = items.get("Credential", "").split("/", 1)[0]
    sig = items.get("Signature", "")
    return (access_key, sig) if access_key and sig else None


def grpc_signature_matches(hex_signature: str, date_time: str, secret_key: str) -> bool:
    """The hex HMAC-SHA1 of the ``x-mq-date-time`` value, compared without regard to case."""
    expected = hmac.digest(secret_key.encode(), date_time.encode(), hashlib.sha1).hex()
    return hmac.compare_digest(hex_signature.lower().encode(), expected.encode())
