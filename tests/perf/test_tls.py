"""repokit perf over TLS: gRPC (server and mutual TLS) against `repokit serve --grpc-use-ssl`,
HTTPS through a TLS front for the HTTP endpoint; the --ssl-* options on the command line and
their errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from repokit.cli.main import make_app
from repokit.perf.errors import PerfError
from repokit.perf.options import PerfOptions
from repokit.perf.profiler import run_perf_blocking
from repokit.perf.transports import grpc as grpc_transport
from repokit.perf.transports.tls import TlsOptions, https_context
from tests.frontends.http.server_thread import ServerThread, copy_models, running_server
from tests.tls_helpers import TlsProxy, make_self_signed_cert

WIRE_FALLBACK = "built-in HTTP/2 client cannot talk to this server"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_self_signed_cert(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_server(
    tmp_path_factory: pytest.TempPathFactory, certs: tuple[Path, Path]
) -> Iterator[ServerThread]:
    key, cert = certs
    repo = copy_models(tmp_path_factory.mktemp("repo"), ("add_sub",))
    with running_server(
        repo, allow_grpc=True, grpc_use_ssl=True, grpc_server_key=str(key),
        grpc_server_cert=str(cert),
    ) as srv:  # fmt: skip
        yield srv


def _options(url: str, **kwargs: Any) -> PerfOptions:
    values: dict[str, Any] = {
        "model": "add_sub",
        "url": url,
        "measurement_interval_ms": 300.0,
        "stability_percentage": 1000.0,
        "max_trials": 12,
    }
    values.update(kwargs)
    return PerfOptions(**values)


def _grpc_url(server: ServerThread) -> str:
    return "localhost:" + server.grpc_url.rsplit(":", 1)[1]  # the certificate's name


@pytest.mark.parametrize("async_mode", [False, True])
def test_grpc_over_tls(
    tls_server: ServerThread, certs: tuple[Path, Path], async_mode: bool
) -> None:
    tls = TlsOptions(grpc_use_ssl=True, grpc_root_certifications_file=certs[1])
    report = run_perf_blocking(
        _options(_grpc_url(tls_server), protocol="grpc", tls=tls, async_mode=async_mode)
    )
    assert report.exit_code == 0 and report.results[0].summary.request_count > 0
    assert not any(WIRE_FALLBACK in w for w in report.warnings)  # our HTTP/2 client did TLS


def never_ready_after(monkeypatch: pytest.MonkeyPatch, seconds: float = 1.0) -> None:
    """A channel that cannot connect fails after ``seconds`` (not 10): the error is the same."""
    monkeypatch.setattr(grpc_transport, "CONNECT_TIMEOUT_S", seconds)


def test_grpc_tls_failures(
    tls_server: ServerThread, certs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    never_ready_after(monkeypatch)
    with pytest.raises(PerfError) as info:  # plaintext against a TLS port
        run_perf_blocking(_options(_grpc_url(tls_server), protocol="grpc"))
    assert "cannot connect" in info.value.message
    untrusted = TlsOptions(grpc_use_ssl=True)  # the system's roots do not know our certificate
    with pytest.raises(PerfError) as info:
        run_perf_blocking(_options(_grpc_url(tls_server), protocol="grpc", tls=untrusted))
    assert "over gRPC with TLS" in info.value.message


def test_grpc_mutual_tls(
    tmp_path: Path, certs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    key, cert = certs
    repo = copy_models(tmp_path / "repo", ("add_sub",))
    with running_server(
        repo, allow_grpc=True, grpc_use_ssl_mutual=True, grpc_server_key=str(key),
        grpc_server_cert=str(cert), grpc_root_cert=str(cert),
    ) as server:  # fmt: skip
        url = _grpc_url(server)
        client = TlsOptions(
            grpc_use_ssl=True,
            grpc_root_certifications_file=cert,
            grpc_private_key_file=key,
            grpc_certificate_chain_file=cert,
        )
        report = run_perf_blocking(_options(url, protocol="grpc", tls=client))
        assert report.exit_code == 0 and report.results[0].summary.request_count > 0
        anonymous = TlsOptions(grpc_use_ssl=True, grpc_root_certifications_file=cert)
        never_ready_after(monkeypatch)
        with pytest.raises(PerfError):  # the server asks for a client certificate
            run_perf_blocking(_options(url, protocol="grpc", tls=anonymous))


@pytest.fixture(scope="module")
def https_front(
    tmp_path_factory: pytest.TempPathFactory, certs: tuple[Path, Path]
) -> Iterator[str]:
    repo = copy_models(tmp_path_factory.mktemp("plain"), ("add_sub",))
    with running_server(repo) as server:
        host, port = server.http_url.rsplit(":", 1)
        with TlsProxy((host, int(port)), *certs) as proxy:
            yield f"https://localhost:{proxy.port}"


@pytest.mark.parametrize("async_mode", [False, True])
def test_https(https_front: str, certs: tuple[Path, Path], async_mode: bool) -> None:
    tls = TlsOptions(https_ca_certificates_file=certs[1])
    report = run_perf_blocking(_options(https_front, tls=tls, async_mode=async_mode))
    assert report.exit_code == 0 and report.results[0].summary.request_count > 0
    assert report.results[0].server is not None  # statistics came over HTTPS too


def test_https_verification(https_front: str) -> None:
    with pytest.raises(PerfError) as info:
        run_perf_blocking(_options(https_front))
    assert "over HTTPS" in info.value.message and "certificate verify failed" in info.value.message
    report = run_perf_blocking(_options(https_front, tls=TlsOptions(https_verify_peer=0)))
    assert report.exit_code == 0


def test_https_context_follows_libcurl_meanings(certs: tuple[Path, Path]) -> None:
    import ssl

    strict = https_context(TlsOptions())
    assert strict.check_hostname and strict.verify_mode == ssl.CERT_REQUIRED
    any_name = https_context(TlsOptions(https_verify_host=0))
    assert not any_name.check_hostname and any_name.verify_mode == ssl.CERT_REQUIRED
    anything = https_context(TlsOptions(https_verify_peer=0))
    assert anything.verify_mode == ssl.CERT_NONE
    key, cert = certs
    https_context(TlsOptions(https_client_certificate_file=cert, https_private_key_file=key))


def test_cli_over_tls_and_its_option_errors(
    tls_server: ServerThread, certs: tuple[Path, Path], tmp_path: Path
) -> None:
    runner = CliRunner()
    base = ["perf", "-m", "add_sub", "-p", "300", "-s", "1000"]
    ok = runner.invoke(
        make_app(),
        [*base, "-i", "grpc", "-u", _grpc_url(tls_server), "--ssl-grpc-use-ssl",
         "--ssl-grpc-root-certifications-file", str(certs[1])],
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output
    assert "concurrency 1:" in ok.output
    cases = [
        (["-i", "grpc", "--ssl-grpc-root-certifications-file", str(certs[1])],
         "need --ssl-grpc-use-ssl"),
        (["--ssl-https-verify-peer", "3"], "--ssl-https-verify-peer must be 0 or 1"),
        (["--ssl-https-private-key-type", "DER", "--ssl-https-private-key-file", "k.der",
          "--ssl-https-client-certificate-file", "c.der"], "DER is not supported"),
        (["--ssl-https-private-key-file", str(certs[0])], "needs both"),
        (["--ssl-grpc-use-ssl"], "applies to -i grpc"),
        (["-i", "grpc", "--ssl-grpc-use-ssl", "--ssl-grpc-root-certifications-file",
          str(tmp_path / "missing.pem")], "cannot be read"),
    ]  # fmt: skip
    for args, message in cases:
        result = runner.invoke(make_app(), [*base, *args])
        assert result.exit_code == 3, (args, result.output)
        assert message in result.output, (args, result.output)
