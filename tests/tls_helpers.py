"""A throwaway self-signed certificate for the TLS tests (openssl, valid for localhost)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def make_self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """(key, certificate) files for CN=localhost with 127.0.0.1 as a subject alt name."""
    key, cert = directory / "server.key", directory / "server.crt"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return key, cert
