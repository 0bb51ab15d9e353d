"""Version folders as Triton reads them, and version policies."""

from __future__ import annotations

from pathlib import Path

import pytest

from repokit.config.parse import parse_text
from repokit.errors import ConfigError
from repokit.repository import (
    VersionDirKind,
    parse_version_dir,
    resolve_backend,
    scan_model_dir,
    scan_repository,
    version_folder_name,
    versions_to_load,
)


@pytest.mark.parametrize(
    ("name", "kind", "version"),
    [
        ("1", VersionDirKind.VERSION, 1),
        ("0", VersionDirKind.VERSION, 0),
        ("10", VersionDirKind.VERSION, 10),
        ("01", VersionDirKind.LEADING_ZEROS, None),
        ("007", VersionDirKind.LEADING_ZEROS, None),
        ("1abc", VersionDirKind.PREFIX_PARSED, 1),
        ("+5", VersionDirKind.PREFIX_PARSED, 5),
        ("-3", VersionDirKind.PREFIX_PARSED, -3),
        ("abc", VersionDirKind.NOT_NUMERIC, None),
        ("warmup", VersionDirKind.SKIPPED_SPECIAL, None),
        ("initial_state", VersionDirKind.SKIPPED_SPECIAL, None),
        ("configs", VersionDirKind.SKIPPED_SPECIAL, None),
        ("99999999999999999999", VersionDirKind.OUT_OF_RANGE, None),
    ],
)
def test_parse_version_dir(name: str, kind: VersionDirKind, version: int | None) -> None:
    parsed = parse_version_dir(name)
    assert parsed.kind is kind
    assert parsed.version == version


def test_negative_version_is_looked_up_as_unsigned() -> None:
    assert version_folder_name(-3) == "18446744073709551613"
    assert version_folder_name(7) == "7"


def _model(tmp_path: Path, folders: list[str]) -> Path:
    model = tmp_path / "m"
    for folder in folders:
        (model / folder).mkdir(parents=True)
    return model


@pytest.mark.parametrize(
    ("policy", "folders", "expected"),
    [
        ("", ["1", "2", "3"], [3]),
        ("version_policy { latest { num_versions: 2 } }", ["1", "2", "10"], [2, 10]),
        ("version_policy { latest { num_versions: 0 } }", ["1"], []),
        ("version_policy { all {} }", ["1", "3", "01", "x"], [1, 3]),
        ("version_policy { specific { versions: [1, 4] } }", ["1", "2"], [1]),
        ("version_policy { specific { versions: [4] } }", ["1"], []),
        ("", ["1abc", "01"], [1]),
    ],
)
def test_versions_to_load(
    tmp_path: Path, policy: str, folders: list[str], expected: list[int]
) -> None:
    model = scan_model_dir(_model(tmp_path, folders))
    config = parse_text(policy)
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    assert versions_to_load(config, model) == expected


def test_scan_repository_lists_hidden_dirs_and_ignores_files(tmp_path: Path) -> None:
    (tmp_path / "a" / "1").mkdir(parents=True)
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / "README.md").write_text("x")
    models = scan_repository(tmp_path)
    assert [m.name for m in models] == [".ipynb_checkpoints", "a"]
    assert models[0].hidden
    assert models[1].existing_versions == {1}


def test_model_config_name_selects_configs_folder(tmp_path: Path) -> None:
    model_path = _model(tmp_path, ["1", "configs"])
    (model_path / "config.pbtxt").write_text('backend: "python"')
    model = scan_model_dir(model_path)
    assert model.config_path("alt") == model_path / "config.pbtxt"
    (model_path / "configs" / "alt.pbtxt").write_text('backend: "python"')
    assert model.config_path("alt") == model_path / "configs" / "alt.pbtxt"


@pytest.mark.parametrize(
    ("config", "files", "backend", "platform", "filename"),
    [
        ("", {"1/model.py": "f"}, "python", "", "model.py"),
        ("", {"1/model.onnx": "f"}, "onnxruntime", "onnxruntime_onnx", "model.onnx"),
        ("", {"1/model.onnx/model.onnx": "d"}, "onnxruntime", "onnxruntime_onnx", "model.onnx"),
        ("", {"1/model.plan": "f"}, "tensorrt", "tensorrt_plan", "model.plan"),
        ("", {"1/model.pt": "f"}, "pytorch", "pytorch_libtorch", "model.pt"),
        ("", {"1/model.xml": "f"}, "openvino", "", "model.xml"),
        (
            "",
            {"1/model.savedmodel/x": "d"},
            "tensorflow",
            "tensorflow_savedmodel",
            "model.savedmodel",
        ),
        ("", {"1/model.graphdef": "f"}, "tensorflow", "tensorflow_graphdef", "model.graphdef"),
        ('platform: "onnxruntime_onnx"', {}, "onnxruntime", "onnxruntime_onnx", "model.onnx"),
        ('backend: "pytorch"', {}, "pytorch", "pytorch_libtorch", "model.pt"),
        ('default_model_filename: "model.py"', {}, "python", "", "model.py"),
        # only the FIRST version folder in byte order is inspected: "10" < "2"
        ("", {"10/other.txt": "f", "2/model.py": "f"}, None, "", ""),
    ],
)
def test_resolve_backend(
    tmp_path: Path,
    config: str,
    files: dict[str, str],
    backend: str | None,
    platform: str,
    filename: str,
) -> None:
    model_path = tmp_path / "mymodel"
    model_path.mkdir()
    (model_path / "1").mkdir()
    for rel, _ in files.items():
        target = model_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("x")
    if "10/other.txt" in files:
        (model_path / "1").rmdir()
    model = scan_model_dir(model_path)
    if backend is None:
        with pytest.raises(ConfigError, match="Could not determine backend"):
            resolve_backend(parse_text(config), model)
        return
    resolved = resolve_backend(parse_text(config), model)
    assert (resolved.name, resolved.backend, resolved.platform) == ("mymodel", backend, platform)
    assert resolved.default_model_filename == filename


def test_custom_backend_from_dotted_model_name(tmp_path: Path) -> None:
    model = scan_model_dir(_model(tmp_path, []))
    model.name = "model.identity"
    resolved = resolve_backend(parse_text(""), model)
    assert resolved.backend == "identity"
    assert resolved.default_model_filename == "model.identity"
