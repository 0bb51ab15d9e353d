"""`repokit validate`: exit codes, the three formats, single-model paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repokit.cli.main import make_app
from repokit.paths import sample_repos_dir
from tests.config.validate_helpers import make_model, python_config

runner = CliRunner()


def _invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(make_app(), ["validate", *args])
    return result.exit_code, result.output


def test_clean_repository_is_quiet(tmp_path: Path) -> None:
    make_model(tmp_path)
    code, output = _invoke(str(tmp_path))
    assert code == 0
    assert output.strip().splitlines() == [
        "1 model checked, 0 would fail to load: 0 errors, 0 warnings"
    ]


def test_errors_exit_1_and_are_grouped_by_model(tmp_path: Path) -> None:
    make_model(tmp_path, "good")
    make_model(tmp_path, "bad", config=python_config("max_batch_size: -1"))
    code, output = _invoke(str(tmp_path))
    assert code == 1
    assert "bad" in output and "max-batch-size-negative" in output
    assert "'max_batch_size' must be non-negative value for bad" in output
    assert "2 models checked, 1 would fail to load: 1 error, 0 warnings" in output


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    code, output = _invoke(str(tmp_path / "missing"))
    assert code == 2 and "does not exist" in output and "Traceback" not in output
    (tmp_path / "file").write_text("x")
    code, output = _invoke(str(tmp_path / "file"))
    assert code == 2 and "not a directory" in output


def test_single_model_directory(tmp_path: Path) -> None:
    make_model(tmp_path, "one", config=python_config("max_batch_size: -1"))
    make_model(tmp_path, "other", config=python_config("bogus: 1"))
    code, output = _invoke(str(tmp_path / "one"), "--format", "json")
    assert code == 1
    data = json.loads(output)
    assert list(data["models"]) == ["one"]


def test_model_option_and_unknown_model(tmp_path: Path) -> None:
    make_model(tmp_path, "a")
    make_model(tmp_path, "b", config=python_config("bogus: 1"))
    assert _invoke(str(tmp_path), "--model", "a")[0] == 0
    code, output = _invoke(str(tmp_path), "--model", "zzz", "--format", "json")
    assert code == 1
    assert json.loads(output)["diagnostics"][0]["rule"] == "model-not-found"


def test_json_format(tmp_path: Path) -> None:
    make_model(tmp_path, config='backend: "python"\nbogus: 1\n')
    code, output = _invoke(str(tmp_path), "--format", "json")
    data = json.loads(output)
    assert code == 1 and data["errors"] == 1
    [diagnostic] = data["models"]["m"]["diagnostics"]
    assert diagnostic["rule"] == "config-parse-error"
    assert (diagnostic["line"], diagnostic["column"]) == (2, 1)


def test_sarif_format(tmp_path: Path) -> None:
    make_model(tmp_path, config='backend: "python"\nbogus: 1\n')
    make_model(tmp_path, "w", versions=("1", "01"))
    code, output = _invoke(str(tmp_path), "--format", "sarif")
    assert code == 1
    sarif = json.loads(output)
    assert sarif["version"] == "2.1.0" and "$schema" in sarif
    run = sarif["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "repokit"
    rule_ids = {r["id"] for r in driver["rules"]}
    assert {"config-parse-error", "version-dir-leading-zeros"} <= rule_ids
    assert all(r["shortDescription"]["text"] for r in driver["rules"])
    by_rule = {r["ruleId"]: r for r in run["results"]}
    parse = by_rule["config-parse-error"]
    assert parse["level"] == "error" and parse["message"]["text"]
    location = parse["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "m/config.pbtxt"
    assert location["region"] == {"startLine": 2, "startColumn": 1}
    assert by_rule["version-dir-leading-zeros"]["level"] == "warning"


def test_strict_and_target_options(tmp_path: Path) -> None:
    make_model(tmp_path, config=None)
    assert _invoke(str(tmp_path))[0] == 0
    code, output = _invoke(str(tmp_path), "--strict")
    assert code == 1 and "config-missing" in output
    (tmp_path / "m" / "config.pbtxt").write_text(
        python_config("instance_group [ { kind: KIND_GPU } ]")
    )
    assert _invoke(str(tmp_path), "--target", "cpu")[0] == 1
    assert _invoke(str(tmp_path), "--target", "gpu")[0] == 0


def test_model_config_name(tmp_path: Path) -> None:
    make_model(tmp_path)
    (tmp_path / "m" / "configs").mkdir()
    (tmp_path / "m" / "configs" / "alt.pbtxt").write_text("bogus: 1")
    assert _invoke(str(tmp_path))[0] == 0
    code, output = _invoke(str(tmp_path), "--model-config-name", "alt", "--format", "json")
    assert code == 1
    assert json.loads(output)["models"]["m"]["diagnostics"][0]["file"] == "m/configs/alt.pbtxt"


def test_invalid_sample_via_cli() -> None:
    code, _ = _invoke(str(sample_repos_dir() / "invalid" / "max-batch-size-negative"))
    assert code == 1


def test_gpus_says_which_gpu_ids_the_server_has(tmp_path: Path) -> None:
    make_model(tmp_path, config=python_config("instance_group [ { kind: KIND_GPU gpus: [ 3 ] } ]"))
    assert _invoke(str(tmp_path), "--target", "gpu")[0] == 0  # ids are not known: assumed
    code, output = _invoke(str(tmp_path), "--target", "gpu", "--gpus", "2", "--format", "json")
    assert code == 1
    [finding] = json.loads(output)["models"]["m"]["diagnostics"]
    assert finding["rule"] == "instance-group-gpu-invalid"
    assert finding["message"].endswith("specifies invalid or unsupported gpu id 3. GPUs with "
                                       "at least the minimum required CUDA compute "
                                       "compatibility of 6.000000 are: 0, 1")  # fmt: skip
    code, output = _invoke(str(tmp_path), "--target", "gpu", "--gpus", "-1")
    assert code == 2 and "--gpus" in output and "Traceback" not in output


def test_backend_directory_is_the_servers(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_model(repo, config='backend: "custom"\n' + python_config("").split("\n", 1)[1])
    (tmp_path / "backends").mkdir()
    code, output = _invoke(str(repo), "--backend-directory", str(tmp_path / "backends"))
    assert code == 1 and "backend-library-missing" in output
    assert "unable to find backend library for backend 'custom'" in output
    (tmp_path / "backends" / "custom").mkdir()
    (tmp_path / "backends" / "custom" / "libtriton_custom.so").write_text("")
    assert _invoke(str(repo), "--backend-directory", str(tmp_path / "backends"))[0] == 0


def test_a_message_of_several_lines_stays_under_its_finding(tmp_path: Path) -> None:
    # a python model's auto_complete_config that raises: the message carries its traceback
    source = (
        "class TritonPythonModel:\n"
        "    @staticmethod\n"
        "    def auto_complete_config(config):\n"
        "        raise ValueError('no')\n"
    )
    make_model(tmp_path, config='backend: "python"\n', files={"1/model.py": source})
    code, output = _invoke(str(tmp_path), "--python-auto-complete")
    assert code == 1
    finding = output[output.index("python-auto-complete-failed") :].splitlines()[1:-1]
    assert finding and all(line.startswith("    ") for line in finding), output
    assert "ValueError: no" in finding[0] and any("auto_complete_config" in x for x in finding)


# Triton 2.51's load answer for each sample ensemble it refuses once its steps have loaded
# (tests/differential/test_ensemble_load_vs_triton.py): validate reports it with that text first
ENSEMBLE_LOAD_ERRORS = {
    "ensemble-decoupled-mixed-inputs": "in ensemble {e}, step of model '{e}' receives inputs "
    "originated from different decoupled models",
    "ensemble-max-batch-size": "ensemble {e} allows maximum batch size 8, but it contains model "
    "{p}-add which only allows maximum batch size to be 4",
    "ensemble-step-input-not-mapped": "in ensemble {e}, input B in model {p}-both is not mapped "
    "to any ensemble tensors",
    "ensemble-step-unknown-input": "in ensemble {e}, ensemble tensor E_IN is mapping to "
    "non-existing input NOPE in model {p}-add",
    "ensemble-step-unknown-output": "in ensemble {e}, ensemble tensor E_OUT is mapped from "
    "non-existing output OUTPUT in model {p}-add",
    "ensemble-step-version-not-loaded": "ensemble '{e}' depends on '{p}-add' whose required "
    "version 0 is not loaded.",
    "ensemble-tensor-datatype-mismatch": "in ensemble {e}, ensemble tensor E_IN: inconsistent "
    "data type: TYPE_FP32 is inferred from model {e} while TYPE_INT32 is inferred from model "
    "{p}-add",
    "ensemble-tensor-shape-mismatch": "in ensemble {e}, ensemble tensor E_IN: inconsistent "
    "shape: [-1,4] is inferred from model {e} while [-1,5] is inferred from model {p}-add",
}


@pytest.mark.parametrize("case", sorted(ENSEMBLE_LOAD_ERRORS))
def test_ensembles_triton_refuses_at_load_fail_validate_with_its_text(case: str) -> None:
    code, output = _invoke(str(sample_repos_dir() / "invalid" / case), "--format", "json")
    assert code == 1
    ensemble = f"{case}-ens"
    [finding] = json.loads(output)["models"][ensemble]["diagnostics"]
    assert finding["rule"] == case
    assert finding["file"] == f"{ensemble}/config.pbtxt" and finding["line"] > 0
    assert finding["path"].startswith("ensemble_scheduling")
    assert finding["message"].startswith(ENSEMBLE_LOAD_ERRORS[case].format(e=ensemble, p=case))


def test_parse_error_in_plain_words_keeps_its_position_in_every_format() -> None:
    case = sample_repos_dir() / "invalid" / "config-parse-error"
    message = (
        "failed to read text proto from config-parse-error/config.pbtxt: the file ends before "
        "the list opened at line 3, column 7 ('input [') is closed: expected ',' or ']'"
    )
    code, output = _invoke(str(case))
    assert code == 1
    assert "config-parse-error/config.pbtxt:5:1" in output and message in output
    data = json.loads(_invoke(str(case), "--format", "json")[1])
    [diagnostic] = data["models"]["config-parse-error"]["diagnostics"]
    assert diagnostic["message"] == message
    assert (diagnostic["line"], diagnostic["column"]) == (5, 1)
    [result] = json.loads(_invoke(str(case), "--format", "sarif")[1])["runs"][0]["results"]
    assert result["message"]["text"] == message
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "config-parse-error/config.pbtxt"
    assert location["region"] == {"startLine": 5, "startColumn": 1}
