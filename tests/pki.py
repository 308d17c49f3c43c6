"""Throwaway certificates for TLS tests, made with the ``openssl`` command line.

Two certificate authorities (``ca`` and ``other_ca``, the one no server here uses), and certificates
signed by ``ca`` for a server (127.0.0.1 and localhost) and a client. ``issue`` makes more, e.g. a
replacement server certificate for rotation tests.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class PKI:
    root: Path
    ca: Pair
    other_ca: Pair
    server: Pair
    client: Pair

    def issue(self, name: str, cn: str, *, server: bool = True, ca: Pair | None = None) -> Pair:
        return _issue(self.root, name, cn, ca or self.ca, server=server)


def server_settings(pki: PKI, mode: str = "enforcing") -> dict[str, str]:
    """A role's TLS settings serving ``pki.server`` in ``mode``."""
    return {
        "tls_server_mode": mode,
        "tls_server_cert_path": str(pki.server.cert),
        "tls_server_key_path": str(pki.server.key),
    }


def server_args(pki: PKI, mode: str = "enforcing") -> list[str]:
    """The command-line options of ``server_settings``."""
    return [f"--{name.replace('_', '-')}={value}" for name, value in server_settings(pki, mode).items()]


def client_settings(pki: PKI) -> dict[str, object]:
    """A role's TLS settings for its calls to peers that serve ``pki.server``."""
    return {"tls_enable": True, "tls_client_trust_cert_path": str(pki.ca.cert)}


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def _key(path: Path) -> None:
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", path)


def _authority(root: Path, name: str) -> Pair:
    pair = Pair(root / f"{name}.pem", root / f"{name}.key")
    _key(pair.key)
    _openssl("req", "-x509", "-new", "-key", pair.key, "-out", pair.cert, "-days", "2",
             "-subj", f"/CN=ferrymq test {name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    return pair


def _issue(root: Path, name: str, cn: str, ca: Pair, *, server: bool) -> Pair:
    pair = Pair(root / f"{name}.pem", root / f"{name}.key")
    _key(pair.key)
    request = root / f"{name}.csr"
    _openssl("req", "-new", "-key", pair.key, "-out", request, "-subj", f"/CN={cn}")
    extensions = root / f"{name}.ext"
    usage = "serverAuth" if server else "clientAuth"
    extensions.write_text(
        f"basicConstraints=CA:FALSE\nextendedKeyUsage={usage}\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    _openssl("x509", "-req", "-in", request, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial",
             "-out", pair.cert, "-days", "2", "-extfile", extensions)  # fmt: skip
    return pair


def make_pki(root: Path) -> PKI:
    root.mkdir(parents=True, exist_ok=True)
    ca = _authority(root, "ca")
    return PKI(
        root=root,
        ca=ca,
        other_ca=_authority(root, "other-ca"),
        server=_issue(root, "server", "ferrymq server", ca, server=True),
        client=_issue(root, "client", "ferrymq client", ca, server=False),
    )


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> PKI:
    """One set of certificates for the whole run (openssl takes a moment per key)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command line is needed to make test certificates")
    return make_pki(tmp_path_factory.mktemp("pki"))
