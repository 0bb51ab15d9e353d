"""`repokit validate` on a JSON config (the load API's override form) and reading model files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
from onnx import TensorProto, helper
from typer.testing import CliRunner

from repokit.cli.main import make_app
from repokit.paths import default_sample_repository


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(make_app(), list(args))
    return result.exit_code, result.output


def _add_sub_dir(tmp_path: Path) -> Path:
    target = tmp_path / "add_sub"
    shutil.copytree(default_sample_repository() / "add_sub", target)
    return target


def _config_json(dims: list[int]) -> dict[str, object]:
    tensor = {"data_type": "type_fp32", "dims": dims}  # enum names match case-insensitively
    return {
        "name": "add_sub",
        "backend": "python",
        "max_batch_size": 8,
        "input": [{"name": "INPUT0", **tensor}, {"name": "INPUT1", **tensor}],
        "output": [{"name": "OUTPUT0", **tensor}, {"name": "OUTPUT1", **tensor}],
    }


def test_valid_json_config_in_a_model_directory(tmp_path: Path) -> None:
    path = _add_sub_dir(tmp_path) / "override.json"
    path.write_text(json.dumps(_config_json([16])))
    code, out = _invoke("validate", str(path))
    assert code == 0, out


def test_json_config_runs_the_load_time_rules(tmp_path: Path) -> None:
    path = _add_sub_dir(tmp_path) / "override.json"
    path.write_text(json.dumps(_config_json([0])))
    code, out = _invoke("validate", str(path), "--format", "json")
    assert code == 1
    rules = [d["rule"] for d in json.loads(out)["models"]["add_sub"]["diagnostics"]]
    assert "input-dims-invalid" in rules


def test_json_config_schema_errors_name_the_field(tmp_path: Path) -> None:
    path = _add_sub_dir(tmp_path) / "bad.json"
    path.write_text(json.dumps({"name": "add_sub", "inputs": []}))
    code, out = _invoke("validate", str(path), "--format", "json")
    assert code == 1
    report = json.loads(out)
    diagnostics = report["diagnostics"] + [
        d for m in report["models"].values() for d in m["diagnostics"]
    ]
    assert any(d["rule"] == "config-json-schema" and d["path"] == "inputs" for d in diagnostics)


def test_json_config_syntax_error(tmp_path: Path) -> None:
    path = _add_sub_dir(tmp_path) / "broken.json"
    path.write_text('{"name": "add_sub",')
    code, out = _invoke("validate", str(path))
    assert code == 1
    assert "config-json-syntax" in out


def _onnx_model(path: Path) -> None:
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4])
    graph = helper.make_graph([helper.make_node("Identity", ["X"], ["Y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.parent.mkdir(parents=True)
    onnx.save(model, path)


def test_deep_finds_config_contradicting_the_onnx_model(tmp_path: Path) -> None:
    model_dir = tmp_path / "repo" / "ident"
    _onnx_model(model_dir / "1" / "model.onnx")
    (model_dir / "config.pbtxt").write_text(
        'platform: "onnxruntime_onnx"\nmax_batch_size: 4\n'
        'input [ { name: "X" data_type: TYPE_INT32 dims: [ 4 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    code, out = _invoke("validate", str(tmp_path / "repo"), "--no-deep")
    assert code == 0, out  # with --no-deep the model files are not read
    for deep in ([], ["--deep"]):  # read by default
        code, out = _invoke("validate", str(tmp_path / "repo"), *deep, "--format", "json")
        assert code == 1
        rules = [d["rule"] for d in json.loads(out)["models"]["ident"]["diagnostics"]]
        assert rules == ["onnx-input-data-type-mismatch"]


def test_deep_is_clean_on_the_sample_repository() -> None:
    code, out = _invoke("validate", str(default_sample_repository()), "--deep")
    assert code == 0, out


def _standalone(tmp_path: Path, config: dict[str, object]) -> Path:
    path = tmp_path / "configs" / "override.json"  # no model folder around it
    path.parent.mkdir()
    path.write_text(json.dumps(config, indent=2))
    return path


def test_standalone_json_config_gets_the_config_rules(tmp_path: Path) -> None:
    path = _standalone(tmp_path, _config_json([0]))
    code, out = _invoke("validate", str(path), "--format", "json")
    assert code == 1, out
    report = json.loads(out)
    findings = report["models"]["add_sub"]["diagnostics"]
    assert [d["rule"] for d in findings] == ["input-dims-invalid"] * 2 + ["output-dims-invalid"] * 2
    finding = findings[0]
    assert finding["path"] == "input[0].dims[0]"
    lines = path.read_text().splitlines()
    line = next(n for n, t in enumerate(lines, 1) if t.strip() == "0")
    assert (finding["file"], finding["line"]) == ("override.json", line)
    code, out = _invoke("validate", str(path))
    assert "1 model checked, 1 would fail to load: 4 errors, 0 warnings" in out
    assert f"override.json:{line}:" in out


def test_standalone_json_config_without_findings(tmp_path: Path) -> None:
    config = _config_json([16])
    config["output"][0]["label_filename"] = "labels.txt"  # type: ignore[index]
    code, out = _invoke("validate", str(_standalone(tmp_path, config)))
    assert code == 0, out  # no folder: files next to a model folder are not asked for
    assert "1 model checked, 0 would fail to load" in out


def test_standalone_json_config_batching_rules(tmp_path: Path) -> None:
    config = _config_json([16]) | {
        "max_batch_size": 0,
        "dynamic_batching": {"preferred_batch_size": [4]},
    }
    code, out = _invoke("validate", str(_standalone(tmp_path, config)), "--format", "json")
    assert code == 1, out
    rules = [d["rule"] for d in json.loads(out)["models"]["add_sub"]["diagnostics"]]
    assert rules and all(not r.startswith(("version", "model-file", "no-version")) for r in rules)


def test_json_config_that_does_not_parse_counts_as_a_failing_model(tmp_path: Path) -> None:
    path = _standalone(tmp_path, {"name": "x", "max_batch_szie": 1})
    code, out = _invoke("validate", str(path))
    assert code == 1
    assert "override.json:3:3 max_batch_szie" in out
    assert "(did you mean 'max_batch_size'?)" in out
    assert "1 model checked, 1 would fail to load: 1 error, 0 warnings" in out


def test_json_config_in_a_model_folder_reports_against_the_json_file(tmp_path: Path) -> None:
    path = _add_sub_dir(tmp_path) / "override.json"
    path.write_text(json.dumps(_config_json([0]), indent=2))
    code, out = _invoke("validate", str(path), "--format", "json")
    assert code == 1
    findings = json.loads(out)["models"]["add_sub"]["diagnostics"]
    assert len(findings) == 4
    assert all(d["file"] == "add_sub/override.json" and d["line"] > 0 for d in findings)
