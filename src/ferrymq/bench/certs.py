"""A throwaway self-signed certificate for TLS benchmarks (the ``openssl`` command line makes it).

It names 127.0.0.1 and localhost, and clients trust it as its own authority."""

from __future__ import annotations

import subprocess
from pathlib import Path


def self_signed(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) PEM files written into ``directory``."""
    cert, key = directory / "bench-cert.pem", directory / "bench-key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=ferrymq bench",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key
