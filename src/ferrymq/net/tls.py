"""TLS settings and the SSL contexts built from them, rebuilt when the certificate files change.

The settings are RocketMQ's (``tls.server.mode``, ``tls.server.certPath``, ...) in snake_case, as a
dataclass every role's config inherits, so that one file names them the same way for a NameServer,
a broker, a controller, the proxy and the AMQP gateway. ``tls_server_mode`` is RocketMQ's:

- ``disabled``: plaintext only;
- ``permissive``: TLS and plaintext on the same port, told apart by the connection's first byte
  (0x16 opens a TLS handshake; no remoting frame or AMQP header starts with it);
- ``enforcing``: TLS only; a plaintext connection is logged and closed.

Certificates are rotated without a restart: each new connection asks for the context, and a context
whose files changed (mtime, size or inode) is built again first. A file that cannot be loaded (half
written, a key that does not match) keeps the old context and says why in the log.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

TLS_MODES = ("disabled", "permissive", "enforcing")
CLIENT_AUTH = ("none", "optional", "require")  # RocketMQ's tls.server.need.client.auth
TLS_HANDSHAKE = 0x16  # the first byte of a TLS record carrying a handshake


class TLSConfigError(ValueError):
    """TLS settings that cannot work: an unknown mode, a missing certificate, a file that will not load."""


@dataclass(kw_only=True)
class TLSSettings:
    """RocketMQ's TLS settings; every role's config inherits them, all off by default."""

    tls_server_mode: str = "disabled"  # disabled | permissive | enforcing
    tls_server_cert_path: str = ""  # PEM certificate (chain) this server presents
    tls_server_key_path: str = ""  # PEM private key of that certificate
    tls_server_trust_cert_path: str = ""  # PEM CA bundle client certificates are checked against
    tls_server_need_client_auth: str = "none"  # none | optional | require
    tls_enable: bool = False  # this role's own connections to its peers use TLS
    tls_client_trust_cert_path: str = ""  # PEM CA bundle to check servers by; empty: the system's
    tls_client_cert_path: str = ""  # a client certificate, for servers that ask for one
    tls_client_key_path: str = ""
    tls_client_auth_server: bool = True  # verify the server's certificate and host name

    def tls_only(self) -> TLSSettings:
        """Just these TLS settings of a role's config (for another role in the same process)."""
        return TLSSettings(**{f.name: getattr(self, f.name) for f in dataclasses.fields(TLSSettings)})

    def server_tls(self) -> ServerTLS | None:
        """The server side, or None when ``tls_server_mode`` is disabled."""
        if self.tls_server_mode not in TLS_MODES:
            raise TLSConfigError(
                f"tls_server_mode must be one of {', '.join(TLS_MODES)}, not {self.tls_server_mode!r}"
            )
        if self.tls_server_mode == "disabled":
            return None
        return ServerTLS(
            self.tls_server_mode,
            self.tls_server_cert_path,
            self.tls_server_key_path,
            trust_cert_path=self.tls_server_trust_cert_path,
            client_auth=self.tls_server_need_client_auth,
        )

    def client_tls(self) -> ClientTLS | None:
        """The client side for this role's calls to its peers, or None unless ``tls_enable``."""
        if not self.tls_enable:
            return None
        return ClientTLS(
            trust_cert_path=self.tls_client_trust_cert_path,
            cert_path=self.tls_client_cert_path,
            key_path=self.tls_client_key_path,
            auth_server=self.tls_client_auth_server,
        )


class _Reloading:
    """A context built by ``build`` from ``paths``, built again when one of the files changes."""

    def __init__(self, paths: tuple[str, ...], build: Callable[[], ssl.SSLContext]) -> None:
        self._paths = tuple(p for p in paths if p)
        self._build = build
        self._signature = self._stat()
        self._context = build()  # a first load that fails is a configuration error: raise it
        self.reloads = 0

    def current(self) -> ssl.SSLContext:
        signature = self._stat()
        if signature != self._signature:
            self._signature = signature
            try:
                self._context = self._build()
            except (OSError, ssl.SSLError, TLSConfigError) as exc:
                log.warning("TLS files %s changed but do not load (%s); keeping the previous ones",
                            ", ".join(self._paths), exc)  # fmt: skip
            else:
                self.reloads += 1
                log.info("TLS files %s reloaded", ", ".join(self._paths))
        return self._context

    def _stat(self) -> tuple[tuple[int, int, int], ...]:
        signature = []
        for path in self._paths:
            try:
                st = os.stat(path)
            except OSError:
                signature.append((0, 0, 0))
            else:
                signature.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(signature)


class ServerTLS:
    """A listener's TLS: its mode and the current server context."""

    def __init__(
        self,
        mode: str,
        cert_path: str,
        key_path: str,
        *,
        trust_cert_path: str = "",
        client_auth: str = "none",
        handshake_timeout: float = 10.0,
    ) -> None:
        if mode not in ("permissive", "enforcing"):
            raise TLSConfigError(f"a TLS listener's mode is permissive or enforcing, not {mode!r}")
        if not cert_path or not key_path:
            raise TLSConfigError(f"tls_server_mode {mode} needs tls_server_cert_path and tls_server_key_path")
        if client_auth not in CLIENT_AUTH:
            raise TLSConfigError(
                f"tls_server_need_client_auth must be one of {', '.join(CLIENT_AUTH)}, not {client_auth!r}"
            )
        if client_auth != "none" and not trust_cert_path:
            raise TLSConfigError("checking client certificates needs tls_server_trust_cert_path")
        self.mode = mode
        self.cert_path, self.key_path, self.trust_cert_path = cert_path, key_path, trust_cert_path
        self.client_auth = client_auth
        self.handshake_timeout = handshake_timeout
        """Seconds a new connection has to send its first byte and finish its handshake."""
        self._contexts = _Reloading((cert_path, key_path, trust_cert_path), self._build)

    @property
    def permissive(self) -> bool:
        return self.mode == "permissive"

    @property
    def reloads(self) -> int:
        return self._contexts.reloads

    def context(self) -> ssl.SSLContext:
        """The context for the next connection (rebuilt first if the files changed)."""
        return self._contexts.current()

    def read_files(self) -> tuple[bytes, bytes, bytes | None]:
        """(certificate chain, key, trust bundle or None) as bytes, for gRPC's credentials."""
        trust = _read(self.trust_cert_path) if self.trust_cert_path else None
        return _read(self.cert_path), _read(self.key_path), trust

    def changed(self) -> bool:
        """Whether the files changed since the last context was built (and build it now)."""
        before = self._contexts.reloads
        self._contexts.current()
        return self._contexts.reloads != before

    def _build(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        _load_chain(context, self.cert_path, self.key_path)
        if self.trust_cert_path:
            _load_trust(context, self.trust_cert_path)
        context.verify_mode = {
            "none": ssl.CERT_NONE,
            "optional": ssl.CERT_OPTIONAL,
            "require": ssl.CERT_REQUIRED,
        }[self.client_auth]
        return context


@dataclass(frozen=True)
class ClientTLS:
    """How a client speaks TLS: whom it trusts (``trust_cert_path``, else the system's roots),
    whether it checks the server at all (``auth_server``), and its own certificate if asked for."""

    trust_cert_path: str = ""
    cert_path: str = ""
    key_path: str = ""
    auth_server: bool = True

    def context(self) -> ssl.SSLContext:
        if self.auth_server:
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
            if self.trust_cert_path:
                _load_trust(context, self.trust_cert_path)
        else:  # RocketMQ's tls.test.mode: encrypt, trust anyone
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cert_path or self.key_path:
            _load_chain(context, self.cert_path, self.key_path)
        return context


def client_context(tls: bool | ClientTLS | ssl.SSLContext | None) -> ssl.SSLContext | None:
    """What SDK callers pass as ``tls=`` (False/None, True for the system's roots, a ClientTLS, or a
    context of their own) turned into a client context or None."""
    if tls is None or tls is False:
        return None
    if tls is True:
        return ClientTLS().context()
    if isinstance(tls, ClientTLS):
        return tls.context()
    return tls


def handshake_failure(address: str, exc: BaseException) -> str:
    """A one-line reason a TLS handshake with ``address`` failed, for errors and logs."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS handshake with {address} failed: certificate not trusted ({exc.verify_message})"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake with {address} failed: {exc.reason or exc}"
    return f"TLS handshake with {address} failed: {exc or type(exc).__name__} (does that port speak TLS?)"


def _load_chain(context: ssl.SSLContext, cert_path: str, key_path: str) -> None:
    if not cert_path or not key_path:
        raise TLSConfigError("a certificate needs both its cert path and its key path")
    try:
        context.load_cert_chain(cert_path, key_path)
    except FileNotFoundError as exc:
        raise TLSConfigError(f"cannot read {exc.filename}: no such file") from None
    except ssl.SSLError as exc:
        raise TLSConfigError(f"cannot load {cert_path} with {key_path}: {exc.reason or exc}") from None


def _load_trust(context: ssl.SSLContext, path: str) -> None:
    try:
        context.load_verify_locations(cafile=path)
    except FileNotFoundError:
        raise TLSConfigError(f"cannot read {path}: no such file") from None
    except ssl.SSLError as exc:
        raise TLSConfigError(f"cannot load CA bundle {path}: {exc.reason or exc}") from None


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise TLSConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
