"""TLS for the perf transports, with perf_analyzer's ``--ssl-*`` options.

gRPC (``--ssl-grpc-*``): ``--ssl-grpc-use-ssl`` turns TLS on; the root certificates verify the
server (the system's when not given); a private key and certificate chain present a client
certificate (mutual TLS). The grpc library gets them as channel credentials, our own HTTP/2
client as an ``ssl.SSLContext`` that offers ALPN ``h2``.

HTTPS (``--ssl-https-*``, libcurl's meanings): ``verify-peer`` 0 accepts any certificate,
``verify-host`` 0 accepts one issued for another name (1 and 2 both check the name, as libcurl
does since 7.28); a CA bundle, and a client certificate and key (PEM; DER certificates are
converted). HTTPS is used when the URL says ``https://`` or any ``--ssl-https-*`` file is given.
"""

from __future__ import annotations

import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from repokit.perf.errors import OPTION_ERROR, PerfError

CERT_TYPES = ("PEM", "DER")


@dataclass(frozen=True)
class TlsOptions:
    grpc_use_ssl: bool = False
    grpc_root_certifications_file: Path | None = None
    grpc_private_key_file: Path | None = None
    grpc_certificate_chain_file: Path | None = None
    https_verify_peer: int = 1
    https_verify_host: int = 2
    https_ca_certificates_file: Path | None = None
    https_client_certificate_file: Path | None = None
    https_client_certificate_type: str = "PEM"
    https_private_key_file: Path | None = None
    https_private_key_type: str = "PEM"

    @property
    def https_files(self) -> bool:
        return any(
            f is not None
            for f in (
                self.https_ca_certificates_file,
                self.https_client_certificate_file,
                self.https_private_key_file,
            )
        )

    @property
    def grpc_files(self) -> bool:
        return any(
            f is not None
            for f in (
                self.grpc_root_certifications_file,
                self.grpc_private_key_file,
                self.grpc_certificate_chain_file,
            )
        )


def _read(path: Path, option: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise PerfError(
            f"{option} '{path}' cannot be read: {exc.strerror or exc}", OPTION_ERROR
        ) from None


def validate_tls(tls: TlsOptions, protocol: str) -> None:
    """PerfError (exit 3) naming the option that cannot work."""
    if tls.https_verify_peer not in (0, 1):
        raise PerfError("--ssl-https-verify-peer must be 0 or 1", OPTION_ERROR)
    if tls.https_verify_host not in (0, 1, 2):
        raise PerfError("--ssl-https-verify-host must be 0, 1 or 2", OPTION_ERROR)
    for value, option in (
        (tls.https_client_certificate_type, "--ssl-https-client-certificate-type"),
        (tls.https_private_key_type, "--ssl-https-private-key-type"),
    ):
        if value not in CERT_TYPES:
            raise PerfError(f"{option} must be PEM or DER, got '{value}'", OPTION_ERROR)
    if tls.https_private_key_type == "DER":
        raise PerfError(
            "--ssl-https-private-key-type DER is not supported; convert the key to PEM "
            "(openssl pkey -inform DER -in KEY -out key.pem)",
            OPTION_ERROR,
        )
    if tls.grpc_files and not tls.grpc_use_ssl:
        raise PerfError("the --ssl-grpc-*-file options need --ssl-grpc-use-ssl", OPTION_ERROR)
    if (tls.grpc_private_key_file is None) != (tls.grpc_certificate_chain_file is None):
        raise PerfError(
            "a client certificate needs both --ssl-grpc-private-key-file and "
            "--ssl-grpc-certificate-chain-file",
            OPTION_ERROR,
        )
    if (tls.https_private_key_file is None) != (tls.https_client_certificate_file is None):
        raise PerfError(
            "a client certificate needs both --ssl-https-client-certificate-file and "
            "--ssl-https-private-key-file",
            OPTION_ERROR,
        )
    if protocol == "grpc" and tls.https_files:
        raise PerfError("the --ssl-https-* options apply to -i http", OPTION_ERROR)
    if protocol == "http" and tls.grpc_use_ssl:
        raise PerfError("--ssl-grpc-use-ssl applies to -i grpc", OPTION_ERROR)


def _load_client_certificate(context: ssl.SSLContext, tls: TlsOptions) -> None:
    cert, key = tls.https_client_certificate_file, tls.https_private_key_file
    if cert is None or key is None:
        return
    option = "--ssl-https-client-certificate-file"
    try:
        if tls.https_client_certificate_type == "DER":
            pem = ssl.DER_cert_to_PEM_cert(_read(cert, option))
            with tempfile.NamedTemporaryFile("w", suffix=".pem") as converted:
                converted.write(pem)
                converted.flush()
                context.load_cert_chain(converted.name, str(key))
        else:
            context.load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as exc:
        raise PerfError(
            f"{option} '{cert}' with --ssl-https-private-key-file '{key}' cannot be used: {exc}",
            OPTION_ERROR,
        ) from None


def https_context(tls: TlsOptions) -> ssl.SSLContext:
    """The context for HTTPS connections, from the ``--ssl-https-*`` options."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if tls.https_ca_certificates_file is not None:
        try:
            context.load_verify_locations(cafile=str(tls.https_ca_certificates_file))
        except (OSError, ssl.SSLError) as exc:
            raise PerfError(
                f"--ssl-https-ca-certificates-file '{tls.https_ca_certificates_file}' cannot "
                f"be used: {exc}",
                OPTION_ERROR,
            ) from None
    if tls.https_verify_host == 0 or tls.https_verify_peer == 0:
        context.check_hostname = False
    if tls.https_verify_peer == 0:
        context.verify_mode = ssl.CERT_NONE
    _load_client_certificate(context, tls)
    context.set_alpn_protocols(["http/1.1"])
    return context


def grpc_credentials_bytes(tls: TlsOptions) -> tuple[bytes | None, bytes | None, bytes | None]:
    """(root certificates, private key, certificate chain) for grpc.ssl_channel_credentials."""

    def read(path: Path | None, option: str) -> bytes | None:
        return None if path is None else _read(path, option)

    return (
        read(tls.grpc_root_certifications_file, "--ssl-grpc-root-certifications-file"),
        read(tls.grpc_private_key_file, "--ssl-grpc-private-key-file"),
        read(tls.grpc_certificate_chain_file, "--ssl-grpc-certificate-chain-file"),
    )


def grpc_wire_context(tls: TlsOptions) -> ssl.SSLContext:
    """The context our own HTTP/2 gRPC client wraps its sockets in (ALPN h2)."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    try:
        if tls.grpc_root_certifications_file is not None:
            context.load_verify_locations(cafile=str(tls.grpc_root_certifications_file))
        if tls.grpc_certificate_chain_file is not None and tls.grpc_private_key_file is not None:
            context.load_cert_chain(
                str(tls.grpc_certificate_chain_file), str(tls.grpc_private_key_file)
            )
    except (OSError, ssl.SSLError) as exc:
        raise PerfError(f"the --ssl-grpc-* files cannot be used: {exc}", OPTION_ERROR) from None
    context.set_alpn_protocols(["h2"])
    return context
