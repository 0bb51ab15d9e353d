"""The qa runner's own pieces (tools/triton_qa.py): the test.sh edits it replays, the scenario
table, the junit results it reads. Running Triton's tests needs a git dir of Triton's server
repository, so that is a manual tool (README), not part of this suite."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tools import triton_qa
from tools import triton_qa_suites as suites


def test_sed_edits_each_line_as_sed_does(tmp_path: Path) -> None:
    config = tmp_path / "config.pbtxt"
    config.write_text('name: "identity_fp32"\nmax_batch_size: 64\ninput { data_type: TYPE_FP32 }\n')
    suites.rename(config, "identity_uint8")
    suites.sed(config, "TYPE_FP32", "TYPE_UINT8")
    suites.sed(config, r"^max_batch_size:.*", "max_batch_size: 8")
    suites.append(config, "dynamic_batching { }")
    assert config.read_text() == (
        'name: "identity_uint8"\nmax_batch_size: 8\ninput { data_type: TYPE_UINT8 }\n'
        "dynamic_batching { }\n"
    )


def test_every_scenario_has_a_unique_label_and_something_to_check() -> None:
    found = suites.scenarios()
    labels = [s.label for s in found]
    assert len(labels) == len(set(labels))
    for scenario in found:
        assert (
            scenario.steps
            or scenario.log_checks
            or scenario.report_ready
            or (not scenario.expect_start)
        ), scenario.label


def test_repokit_is_not_given_flags_only_tritonserver_has() -> None:
    scenario = suites.Scenario("x", "cwd", None, flags=["--backend-config=python,a=b"])
    assert scenario.flags_for("triton") == ["--log-verbose=1", "--backend-config=python,a=b"]
    assert scenario.flags_for("repokit") == ["--log-verbose=1"]


def test_junit_results_become_one_line_per_test(tmp_path: Path) -> None:
    xml = tmp_path / "r.xml"
    xml.write_text(
        '<testsuites><testsuite><testcase classname="lifecycle_test.LifecycleTest" name="a"/>'
        '<testcase classname="lifecycle_test.LifecycleTest" name="b">'
        '<failure message="AssertionError: 1 != 0">trace</failure></testcase>'
        '<testcase classname="x.T" name="c"><skipped message="hangs"/></testcase>'
        "</testsuite></testsuites>"
    )
    found = triton_qa.junit_outcomes(xml, "L0/lifecycle/lifecycle_test.py", "[k]")
    assert [(o.test, o.result, o.detail) for o in found] == [
        ("L0/lifecycle/lifecycle_test.py::LifecycleTest::a[k]", "PASS", ""),
        ("L0/lifecycle/lifecycle_test.py::LifecycleTest::b[k]", "FAIL", "AssertionError: 1 != 0"),
        ("L0/lifecycle/lifecycle_test.py::T::c[k]", "SKIP", "hangs"),
    ]


UNITTEST_FILE = """
import unittest


class Collector(unittest.TestCase):  # reads unittest's result object, as qa's collector does
    def run(self, result=None):
        found = super().run(result)
        assert found.testsRun >= 1
        return found


class HttpTest(Collector):
    def test_pass(self):
        pass

    def test_fail(self):
        self.assertEqual(1, 2)

    def test_subtests(self):
        for value in (1, 2):
            with self.subTest(value=value):
                self.assertEqual(value, 1)

    def test_error(self):
        raise RuntimeError("broken")
"""


def test_unittest_runs_give_one_line_per_test(tmp_path: Path) -> None:
    (tmp_path / "http_test.py").write_text(UNITTEST_FILE)
    run = suites.PytestRun("http_test.py", runner="unittest")
    found = triton_qa.run_pytest(run, tmp_path, "L0_http/x", tmp_path, dict(os.environ))
    results = {o.test.rsplit("::", 1)[1]: (o.result, o.detail) for o in found}
    subtest_result, subtest_detail = results.pop("test_subtests")
    assert results == {
        "test_error": ("ERROR", "broken"),
        "test_fail": ("FAIL", "1 != 2"),
        "test_pass": ("PASS", ""),
    }
    assert subtest_result == "FAIL" and subtest_detail.endswith("(value=2): 2 != 1")
    assert all(o.test.startswith("L0_http/x/http_test.py::HttpTest::") for o in found)


def test_a_unittest_file_that_does_not_import_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "broken_test.py").write_text("import no_such_module_here\n")
    run = suites.PytestRun("broken_test.py", runner="unittest")
    [outcome] = triton_qa.run_pytest(run, tmp_path, "L0_http/y", tmp_path, dict(os.environ))
    assert outcome.result == "ERROR" and "no results" in outcome.detail


def test_log_checks_count_matches(tmp_path: Path) -> None:
    text = "Finalize invoked\nFinalize invoked\n"
    exact = suites.LogCheck("fin", "Finalize invoked", exactly=3)
    assert triton_qa.log_check(exact, text, "s").result == "FAIL"
    assert triton_qa.log_check(suites.LogCheck("fin", "Finalize"), text, "s").result == "PASS"


def test_list_names_what_is_not_run_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    assert triton_qa.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "L0_backend_python/lifecycle/init_error" in out
    assert "env: conda-packed" in out


def test_a_run_without_the_git_dir_says_what_is_missing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRITON_SERVER_GIT", raising=False)
    assert triton_qa.main([]) == 2
    assert "--server-git" in capsys.readouterr().err


def test_compare_prints_the_table_of_two_saved_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    theirs = {"triton": [{"test": "a", "result": "PASS", "detail": ""},
                         {"test": "b", "result": "PASS", "detail": ""}]}  # fmt: skip
    ours = {"repokit": [{"test": "a", "result": "PASS", "detail": ""},
                        {"test": "b", "result": "FAIL", "detail": "x"}]}  # fmt: skip
    (tmp_path / "t.json").write_text(json.dumps(theirs))
    (tmp_path / "r.json").write_text(json.dumps(ours))
    assert triton_qa.main(["--compare", str(tmp_path / "t.json"), str(tmp_path / "r.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["a", "PASS", "PASS"]
    assert lines[2].split() == ["b", "PASS", "FAIL", "<<"]
    assert lines[-1] == "# 2 tests: triton passes 2, repokit passes 1, both 1"
    assert triton_qa.main(["--compare", str(tmp_path / "r.json"), str(tmp_path / "t.json")]) == 2


def test_repokit_only_flags_go_to_repokit_alone() -> None:
    scenario = suites.Scenario(
        "x", "cwd", None, verbose=False, repokit_flags=["--allow-client-shm=true"]
    )
    assert scenario.flags_for("triton") == []
    assert scenario.flags_for("repokit") == ["--allow-client-shm=true"]


def test_the_aio_tests_repository_has_the_qa_images_models(tmp_path: Path) -> None:
    """L0_http's ``models`` (Triton's QA image copies six example models, test.sh adds
    simple_string_dyna_sequence): python stand-ins with the example configs, inception_graphdef
    one that loads (its labels beside it). The configs here are small made-up ones."""
    examples = tmp_path / "docs/examples/model_repository"
    io = 'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]\n'
    io += 'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]\n'
    for name in ("simple", "simple_identity", "simple_sequence", "simple_string"):
        (examples / name).mkdir(parents=True)
        (examples / name / "config.pbtxt").write_text(f'name: "{name}"\nplatform: "x"\n{io}')
    (examples / "simple_dyna_sequence").mkdir()
    (examples / "simple_dyna_sequence" / "config.pbtxt").write_text(
        'name: "simple_dyna_sequence"\nplatform: "x"\n' + io + "sequence_batching { control_input"
        ' [ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }'
        " ] } ] }\n"
    )
    (examples / "inception_graphdef").mkdir()
    (examples / "inception_graphdef" / "config.pbtxt").write_text(
        'name: "inception_graphdef"\nplatform: "tensorflow_graphdef"\nmax_batch_size: 128\n'
        'input [ { name: "input" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        'output [ { name: "out" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "l.txt" } ]\n'
    )
    (examples / "inception_graphdef" / "inception_labels.txt").write_text("a\nb\n")
    scenario = next(s for s in suites.scenarios() if s.label == "L0_http/python_http_aio")
    assert scenario.layout is not None
    repo = tmp_path / "qa" / "L0_http" / "models"
    repo.mkdir(parents=True)
    scenario.layout(tmp_path / "qa", repo)
    assert sorted(p.name for p in repo.iterdir()) == [
        "inception_graphdef",
        "simple",
        "simple_dyna_sequence",
        "simple_identity",
        "simple_sequence",
        "simple_string",
        "simple_string_dyna_sequence",
    ]
    for folder in repo.iterdir():
        assert 'backend: "python"' in (folder / "config.pbtxt").read_text(), folder.name
        assert (folder / "1" / "model.py").is_file(), folder.name
    assert (repo / "inception_graphdef" / "inception_labels.txt").read_text() == "a\nb\n"
    assert "TYPE_STRING" in (repo / "simple_string_dyna_sequence" / "config.pbtxt").read_text()
    assert scenario.flags_for("repokit") == ["--allow-client-shm=true"]
    assert scenario.flags_for("triton") == []


def test_heavy_scenarios_run_only_when_named() -> None:
    light = suites.Scenario("L0_x/light", "L0_x", None)
    heavy = suites.Scenario("L0_x/heavy", "L0_x", None, heavy=True)
    assert triton_qa.select([light, heavy], []) == [light]
    assert triton_qa.select([light, heavy], ["L0_x"]) == [light, heavy]
    assert any(s.heavy for s in suites.scenarios())  # L0_large_payload
