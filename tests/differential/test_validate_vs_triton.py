"""repokit validate's verdict must equal real Triton 2.51's, model by model.

All sample_repos/invalid/* cases and the valid sample repository are merged into one repository,
Triton is started once (explicit model control) and each model is loaded through
``POST /v2/repository/models/<m>/load``.

Only the Python backend exists in the reference build. A model of another backend that fails
with "unable to find backend library" has passed every check Triton runs before loading the
backend, so for those models repokit must report no error of the ``repository`` stage (errors
of later stages, which Triton never reached, are allowed).

Triton 2.51's python backend hangs forever when a version has no model file; such loads are
started last and a timeout counts as a failed load.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from google.protobuf import json_format

from repokit.config.report import RepositoryReport, ValidateOptions
from repokit.config.rules.catalog import REPOSITORY, RULES
from repokit.config.validate import validate_repository
from repokit.paths import default_sample_repository, sample_repos_dir
from tests.differential.triton_reference import LoadResult, TritonReference, running_triton

pytestmark = [pytest.mark.triton, pytest.mark.timeout(900)]  # loads ~160 models into Triton
HANG_RULES = frozenset({"model-file-missing", "model-file-wrong-kind"})
VALID_PYTHON_MODELS = sorted(
    p.parent.name
    for p in default_sample_repository().glob("*/config.pbtxt")
    if 'backend: "python"' in p.read_text()
)


def _merge_sources() -> list[Path]:
    invalid = sorted(p for p in (sample_repos_dir() / "invalid").iterdir() if p.is_dir())
    return [*invalid, default_sample_repository()]


def _model_names() -> list[str]:
    names: list[str] = []
    for source in _merge_sources():
        names += sorted(p.name for p in source.iterdir() if p.is_dir())
    return names


def build_merged_repository(target: Path) -> Path:
    target.mkdir(parents=True)
    for source in _merge_sources():
        for entry in source.iterdir():
            if entry.name == "expected.json":
                continue
            destination = target / entry.name
            assert not destination.exists(), f"model name {entry.name} is not globally unique"
            if entry.is_dir():
                shutil.copytree(entry, destination)
            else:
                shutil.copy2(entry, destination)
    return target


@pytest.fixture(scope="session")
def merged_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_merged_repository(tmp_path_factory.mktemp("triton-diff") / "repo")


@pytest.fixture(scope="session")
def repokit_report(merged_repository: Path) -> RepositoryReport:
    return validate_repository(merged_repository, ValidateOptions())


@pytest.fixture(scope="session")
def triton_session(
    merged_repository: Path,
    repokit_report: RepositoryReport,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, LoadResult], dict[str, dict[str, object]]]]:
    with running_triton(
        merged_repository,
        tmp_path_factory.mktemp("triton-server"),
        ["--model-control-mode=explicit", "--exit-on-error=false", "--model-load-thread-count=16"],
    ) as server:

        def may_hang(name: str) -> bool:
            return any(d.rule in HANG_RULES for d in repokit_report.models[name].diagnostics)

        names = sorted(repokit_report.models)
        results = server.judge([n for n in names if not may_hang(n)], timeout=90, workers=6)
        results.update(server.judge([n for n in names if may_hang(n)], timeout=10, workers=6))
        # (re)load first: a crash restart in judge() forgets earlier loads
        configs = {
            name: server.model_config(name)
            for name in VALID_PYTHON_MODELS
            if name in results and server.load(name).ok
        }
        yield results, configs


@pytest.mark.parametrize("model", _model_names())
def test_verdict_matches_triton(
    model: str,
    repokit_report: RepositoryReport,
    triton_session: tuple[dict[str, LoadResult], dict[str, dict[str, object]]],
) -> None:
    report = repokit_report.models[model]
    triton = triton_session[0][model]
    errors = [d for d in report.diagnostics if d.is_error]
    if triton.backend_missing:
        early = [
            d.rule
            for d in errors
            if RULES.get(d.rule) is None or RULES[d.rule].stage_for(strict=False) == REPOSITORY
        ]
        assert not early, (
            f"Triton got past its repository checks (it only lacks the backend: "
            f"{triton.message!r}) but repokit reports {early}"
        )
        return
    described = [f"{d.rule}: {d.message}" for d in errors]
    assert report.ok == triton.ok, (
        f"Triton {'loaded' if triton.ok else 'refused'} {model!r} "
        f"({triton.status} {triton.message!r}); repokit errors: {described}"
    )


def _ints(value: object) -> object:
    """Protobuf JSON writes int64 as strings, Triton writes numbers: compare them as ints."""
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return value


@pytest.mark.parametrize("model", VALID_PYTHON_MODELS)
def test_normalised_config_matches_triton_config_endpoint(
    model: str,
    repokit_report: RepositoryReport,
    triton_session: tuple[dict[str, LoadResult], dict[str, dict[str, object]]],
) -> None:
    """NormalizeModelConfig + NormalizeInstanceGroup give exactly GET /v2/models/<m>/config."""
    triton_config = triton_session[1][model]
    config = repokit_report.models[model].config
    assert config is not None
    ours = json_format.MessageToDict(
        config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    assert _ints(ours) == _ints(triton_config)


MODEL_PY = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
IO = (
    'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
)


def _python_model(root: Path, name: str, config: str | None, version: str | None = "1") -> None:
    model = root / name
    model.mkdir(parents=True)
    if config is not None:
        (model / "config.pbtxt").write_text(config)
    if version is not None:
        (model / version).mkdir()
        (model / version / "model.py").write_text(MODEL_PY)


def _run_server(
    repo: Path, workdir: Path, flags: list[str]
) -> AbstractContextManager[TritonReference]:
    return running_triton(repo, workdir, ["--exit-on-error=false", *flags])


def test_strict_mode_verdicts(tmp_path: Path) -> None:
    """--strict is Triton's --disable-auto-complete-config."""
    repo = tmp_path / "repo"
    _python_model(repo, "strict_no_config", None)
    _python_model(repo, "strict_no_io", 'backend: "python"\n')
    _python_model(repo, "strict_bad_dims", 'backend: "python"\n' + IO.replace("[ 4 ]", "[ 0 ]", 1))
    _python_model(repo, "strict_ok", 'backend: "python"\nmax_batch_size: 2\n' + IO)
    flags = ["--model-control-mode=explicit", "--disable-auto-complete-config"]
    with _run_server(repo, tmp_path / "srv", flags) as server:
        verdicts = server.judge(sorted(p.name for p in repo.iterdir()), timeout=60)
    report = validate_repository(repo, ValidateOptions(strict=True))
    assert {n: r.ok for n, r in report.models.items()} == {n: v.ok for n, v in verdicts.items()}
    assert not verdicts["strict_no_config"].ok and verdicts["strict_no_io"].ok


def test_repository_root_verdicts_from_the_index(tmp_path: Path) -> None:
    """Hidden and stray directories at the root are models: start Triton in `none` mode on the
    whole repository and read each model's state from the repository index."""
    repo = tmp_path / "repo"
    _python_model(repo, "root_ok", 'backend: "python"\n' + IO)
    (repo / ".ipynb_checkpoints").mkdir()
    (repo / "stray_folder" / "notes").mkdir(parents=True)
    _python_model(repo, ".hidden_model", 'backend: "python"\n' + IO)
    (repo / "README.md").write_text("files at the root are ignored\n")
    with _run_server(repo, tmp_path / "srv", ["--model-control-mode=none"]) as server:
        index = server.index()
    ready = {entry["name"] for entry in index if entry.get("state") == "READY"}
    report = validate_repository(repo, ValidateOptions())
    # a directory that fails before Triton registers it is missing from the index: not READY
    states = {name: name in ready for name in report.models}
    assert {n: r.ok for n, r in report.models.items()} == states
    assert states == {
        "root_ok": True,
        ".hidden_model": True,
        ".ipynb_checkpoints": False,
        "stray_folder": False,
    }
    hidden = report.models[".hidden_model"].diagnostics
    assert [d.rule for d in hidden] == ["model-dir-hidden"]
