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
import functools
import hashlib
import hmac
import operator
from collections.abc import Callable
from dataclasses import dataclass

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
    values = _values_by_sorted_key(tuple(ext_fields), version <= _V4_9_3)(ext_fields)
    try:
        return "".join(values).encode()
    except TypeError:  # a value that is not a string yet: as Java would print it
        return "".join(map(str, values)).encode()


@functools.lru_cache(maxsize=1024)
def _values_by_sorted_key(keys: tuple[str, ...], old_peer: bool) -> Callable[[dict[str, str]], tuple]:
    """What picks the signed values of extFields with these keys, in the order of the sorted keys.

    A peer sends the same keys in the same order request after request, so the sort is done once
    per key set and each request is one C call (operator.itemgetter), not a sort and a loop."""
    skip = (SIGNATURE, _UNIQUE_KEY_QUERY) if old_peer else (SIGNATURE,)
    signed = sorted(key for key in keys if key not in skip)
    if len(signed) > 1:
        return operator.itemgetter(*signed)
    if signed:
        only = signed[0]
        return lambda fields: (fields[only],)
    return lambda fields: ()


_BLOCK = 64  # SHA-1's block size


@functools.lru_cache(maxsize=1024)
def _pads(secret_key: str) -> tuple[hashlib._Hash, hashlib._Hash]:
    """HMAC-SHA1 (RFC 2104) keyed with ``secret_key``: the inner and outer hashes after their key
    blocks, to copy per request (keying anew, or hmac.HMAC's Python wrapper, costs more; so does
    OpenSSL's HMAC object, whose copy is dearer than two hash copies)."""
    key = secret_key.encode()
    if len(key) > _BLOCK:
        key = hashlib.sha1(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    inner = hashlib.sha1(bytes(k ^ 0x36 for k in key))
    outer = hashlib.sha1(bytes(k ^ 0x5C for k in key))
    return inner, outer


def py_mac(content: bytes, secret_key: str, body: bytes | memoryview) -> bytes:
    """The signature of ``content + body`` as base64 bytes: the reference for the C version
    (ferrymq/_native/hmac.c) that ``_mac`` is when it is built."""
    inner_pad, outer_pad = _pads(secret_key)
    inner = inner_pad.copy()
    inner.update(content)
    if body:
        inner.update(body)
    outer = outer_pad.copy()
    outer.update(inner.digest())
    return binascii.b2a_base64(outer.digest(), newline=False)


_hmac_c = load("hmac")


@functools.lru_cache(maxsize=1024)
def _prepared(secret_key: str) -> bytes:
    """HMAC-SHA1's keyed inner and outer SHA-1 states for ``secret_key``, as the C version keeps them."""
    assert _hmac_c is not None
    return _hmac_c.prepare(secret_key.encode())


def _c_mac(content: bytes, secret_key: str, body: bytes | memoryview) -> bytes:
    assert _hmac_c is not None
    return binascii.b2a_base64(_hmac_c.mac(_prepared(secret_key), content, body), newline=False)


_mac = py_mac if _hmac_c is None else _c_mac


def signature(content: bytes, secret_key: str, body: bytes | memoryview = b"") -> str:
    """base64(HMAC-SHA1(secret_key, content + body)), as RocketMQ's AclSigner computes it."""
    return _mac(content, secret_key, body).decode()


def py_request_signature(
    ext_fields: dict[str, str], body: bytes | memoryview, version: int, secret_key: str
) -> str:
    """The Signature of a remoting request with these extFields and body (the reference; with the
    C accelerator built, ``request_signature`` hashes the values in place)."""
    return _mac(_fields_content(ext_fields, version), secret_key, body).decode()


def py_signature_matches(
    given: str, ext_fields: dict[str, str], body: bytes | memoryview, version: int, secret_key: str
) -> bool:
    """Whether ``given`` is the request's Signature (the reference of ``signature_matches``)."""
    expected = py_request_signature(ext_fields, body, version, secret_key)
    try:
        return hmac.compare_digest(given, expected)
    except TypeError:  # not ASCII: not a base64 signature
        return False


def _c_request_signature(
    ext_fields: dict[str, str], body: bytes | memoryview, version: int, secret_key: str
) -> str:
    assert _hmac_c is not None
    try:
        signed = _hmac_c.sign(_prepared(secret_key), ext_fields, body, version <= _V4_9_3)
    except TypeError:  # a value that is not a string yet
        return py_request_signature(ext_fields, body, version, secret_key)
    return signed.decode()


def _c_signature_matches(
    given: str, ext_fields: dict[str, str], body: bytes | memoryview, version: int, secret_key: str
) -> bool:
    assert _hmac_c is not None
    try:
        return _hmac_c.verify(_prepared(secret_key), ext_fields, body, version <= _V4_9_3, given)
    except TypeError:  # a value that is not a string yet, or a signature that is not one
        return py_signature_matches(given, ext_fields, body, version, secret_key)


request_signature = py_request_signature if _hmac_c is None else _c_request_signature
signature_matches = py_signature_matches if _hmac_c is None else _c_signature_matches


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a client signs with: ``access_key`` names the user, ``secret_key`` is its password."""

    access_key: str
    secret_key: str
    security_token: str = ""

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("credentials need both an access key and a secret key")

    def __repr__(self) -> str:  # the secret never reaches a log through a repr
        return f"Credentials(access_key={self.access_key!r})"

    def sign(self, command: RemotingCommand) -> None:
        """Add AccessKey (and SecurityToken) and the Signature to ``command``'s extFields."""
        fields = command.ext_fields
        fields.pop(SIGNATURE, None)
        fields[ACCESS_KEY] = self.access_key
        if self.security_token:
            fields[SECURITY_TOKEN] = self.security_token
        fields[SIGNATURE] = request_signature(fields, command.body, command.version, self.secret_key)


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
