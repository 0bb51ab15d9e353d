"""`repokit build` on the command line: text and JSON reports, exit codes 0/1/2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from repokit.cli import build as build_cli
from tests.build import models
from tests.build.test_builder import make_source


@pytest.fixture
def app() -> typer.Typer:
    application = typer.Typer()
    build_cli.register(application)

    @application.command("version")
    def version() -> None:  # a second command keeps `build` a subcommand
        """Unused."""

    return application


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = make_source(tmp_path / "src")
    shutil.rmtree(root / "broken")
    return root


def _run(app: typer.Typer, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["build", *args])
    return result.exit_code, result.stdout, result.stderr


def test_text_report_then_up_to_date_then_check(
    app: typer.Typer, source: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    shapes = ["--shape", "x:1,16,64", "--shape", "data:1,16,64", "--shape", "new_shape:4,4,16"]
    code, stdout, _ = _run(app, str(source), "-o", str(out), "--profile", *shapes)
    assert code == 0, stdout
    assert "built seq -> onnxruntime (1 profile(s), 3 warmup sample(s))" in stdout
    assert "built add_sub -> python (2 warmup sample(s))" in stdout
    code, stdout, _ = _run(app, str(source), "-o", str(out), "--profile", *shapes)
    assert code == 0 and "7 up-to-date" in stdout
    code, stdout, _ = _run(app, str(source), "-o", str(out), "--profile", "--check", *shapes)
    assert code == 0 and "up to date" in stdout
    (source / "seq" / "config.pbtxt").write_text(models.SEQUENCE_BIAS_CONFIG + "\n# edited\n")
    code, stdout, _ = _run(app, str(source), "-o", str(out), "--profile", "--check", *shapes)
    assert code == 1 and "out of date: seq" in stdout


def test_json_report(app: typer.Typer, source: Path, tmp_path: Path) -> None:
    code, stdout, _ = _run(
        app, str(source), "-o", str(tmp_path / "out"), "--profile", "--to", "tensorrt",
        "--model", "seq", "--shape", "x:1,16,64", "--profiles", "2", "--format", "json",
    )  # fmt: skip
    assert code == 0
    report = json.loads(stdout)
    [seq] = report["models"]
    assert seq["status"] == "built" and len(seq["profiles"]) == 2
    assert seq["engine"]["requested"] and not seq["engine"]["built"]
    assert "engine build skipped" in seq["engine"]["skipped_reason"]
    assert report["exit_code"] == 0 and report["lock_file"].endswith("repokit.lock.json")


def test_engine_require_without_tensorrt_exits_1_with_the_reason(
    app: typer.Typer, source: Path, tmp_path: Path
) -> None:
    code, stdout, _ = _run(
        app, str(source), "-o", str(tmp_path / "out"), "--to", "tensorrt", "--engine", "require",
        "--model", "fixed",
    )  # fmt: skip
    assert code == 1
    assert "failed fixed" in stdout
    assert "--engine require: engine build skipped:" in stdout
    assert "tensorrt" in stdout


def test_engine_require_alone_implies_the_conversion(
    app: typer.Typer, source: Path, tmp_path: Path
) -> None:
    code, stdout, stderr = _run(
        app, str(source), "-o", str(tmp_path / "out"), "--engine", "require", "--model", "fixed"
    )
    assert "note: --engine require implies --to tensorrt" in stderr
    assert code == 1  # never a silent success: TensorRT is not installed here
    assert "failed fixed" in stdout and "--engine require: engine build skipped:" in stdout


def test_failed_model_exits_1_and_says_why_once(app: typer.Typer, tmp_path: Path) -> None:
    root = make_source(tmp_path / "src")
    code, stdout, stderr = _run(app, str(root), "-o", str(tmp_path / "out"), "--model", "broken")
    assert code == 1
    assert "onnx-input-data-type-mismatch" in stdout
    finding = "configuration expects datatype TYPE_INT32 for input 'INPUT0'"
    assert (stdout + stderr).count(finding) == 1, stdout


def test_validation_failures_are_listed_once(
    app: typer.Typer, source: Path, tmp_path: Path
) -> None:
    (source / "fixed" / "config.pbtxt").write_text('name: "fixed"\nmax_batch_size: -3\n')
    code, stdout, _ = _run(app, str(source), "-o", str(tmp_path / "out"), "--model", "fixed")
    assert code == 1
    assert "does not pass validation (1 error(s))" in stdout
    [line] = [line for line in stdout.splitlines() if "max_batch_size" in line]
    assert "error" in line


def test_check_says_what_changed(app: typer.Typer, source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    base = [str(source), "-o", str(out), "--profile", "--model", "fixed", "--model", "strings"]
    assert _run(app, *base)[0] == 0
    code, stdout, _ = _run(app, *base, "--check", "--warmup-data", "random")
    assert code == 1
    assert "build options changed: --warmup-data zero -> random" in stdout

    (source / "fixed" / "notes.txt").write_text("new file")
    code, stdout, _ = _run(app, *base, "--check", "--warmup-data", "random")
    assert code == 1  # every reason, not only the first
    assert (
        "build options changed: --warmup-data zero -> random; source files changed: added "
        "notes.txt" in stdout
    )
    code, stdout, _ = _run(app, *base, "--check")
    assert code == 1 and "source files changed: added notes.txt" in stdout
    assert "out of date: fixed" in stdout
    code, stdout, _ = _run(app, *base)
    assert code == 0 and "rebuilt: source files changed: added notes.txt" in stdout

    lock_path = out / "repokit.lock.json"
    lock = json.loads(lock_path.read_text())
    current = lock["tools"]["onnxruntime"]
    lock["tools"]["onnxruntime"] = "0.1.0"
    lock_path.write_text(json.dumps(lock))
    code, stdout, _ = _run(app, *base, "--check")
    assert code == 1
    assert f"tool versions changed: onnxruntime 0.1.0 -> {current}" in stdout
    assert "out of date: fixed, strings" in stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give the output repository with -o OUT"),
        (["-o", "OUT", "--shape", "x:1,2"], "three comma-separated parts"),
        (["-o", "OUT", "--profiles", "2", "--split-at-preferred"], "exclude each other"),
        (["-o", "SRC/inner"], "inside the source repository"),
        (["-o", "OUT", "--sample-data", "nowhere.json"], "does not exist"),
    ],
)
def test_usage_errors_exit_2(
    app: typer.Typer, source: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    resolved = [a.replace("OUT", str(tmp_path / "out")).replace("SRC", str(source)) for a in args]
    code, stdout, stderr = _run(app, str(source), *resolved)
    assert code == 2
    assert message in stderr
    assert "Traceback" not in stdout + stderr


def test_in_place(app: typer.Typer, source: Path) -> None:
    code, stdout, _ = _run(app, str(source), "--in-place", "--profile", "--model", "fixed")
    assert code == 0, stdout
    assert (source / "repokit.lock.json").is_file()
    assert (source / "fixed" / "warmup").is_dir()


def test_unwritable_output_is_an_error_not_a_traceback(
    app: typer.Typer, source: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, stdout, stderr = _run(app, str(source), "-o", str(blocker / "out"))
    assert code == 1
    assert "error:" in stderr and "Traceback" not in stdout + stderr
