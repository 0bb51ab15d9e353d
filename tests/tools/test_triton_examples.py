"""The example-client runner (tools/triton_examples.py): how it turns Triton's configs into
python-backend stand-ins and judges a client run; and, given git dirs of Triton's client and
server repositories ($TRITON_CLIENT_GIT, $TRITON_SERVER_GIT), a run of Triton's example clients
against repokit serve on both gRPC transports (slow)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from repokit.config.parse import parse_text
from tools import triton_examples as examples

DYNA_CONFIG = """
name: "dyna"
platform: "tensorflow_graphdef"
max_batch_size: 8
sequence_batching {
  oldest { max_candidate_sequences: 4 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""


def test_a_stand_in_keeps_the_config_and_runs_on_the_python_backend() -> None:
    stand_in = examples.StandIn("simple_dyna_sequence", "x", examples.SEQUENCE)
    text = examples.stand_in_config(DYNA_CONFIG, stand_in)
    config = parse_text(text)
    assert config.name == "simple_dyna_sequence"
    assert (config.platform, config.backend) == ("", "python")
    assert config.max_batch_size == 8
    assert config.instance_group[0].count == 2
    assert config.sequence_batching.oldest.max_candidate_sequences == 4
    corrid = config.sequence_batching.control_input[1].control[0]
    assert corrid.data_type == examples.mc.TYPE_UINT64


def test_the_string_correlation_id_stand_in_is_made_as_qa_l0_grpc_makes_it() -> None:
    stand_in = examples.StandIn("s", "x", examples.ACCUMULATOR, string_corrid=True)
    config = parse_text(examples.stand_in_config(DYNA_CONFIG, stand_in))
    assert config.sequence_batching.control_input[1].control[0].data_type == (
        examples.mc.TYPE_STRING
    )
    assert config.sequence_batching.control_input[0].control[0].int32_false_true == [0, 1]


def test_every_case_names_a_setup_and_every_setup_a_stand_in() -> None:
    names = [case.name for case in examples.CASES]
    assert len(names) == len(set(names))
    for case in examples.CASES:
        assert case.setup in examples.SETUPS, case.name
        assert case.script not in examples.SKIPPED, case.name
    for setup in examples.SETUPS.values():
        assert set(setup.models) <= set(examples.STAND_INS), setup.name


@pytest.mark.parametrize(
    ("fails", "code", "output", "problem"),
    [
        (False, 0, "PASS: infer", None),
        (False, 0, "done", "no PASS printed"),
        (False, 1, "PASS", "exit 1"),
        (False, None, "", "timed out"),
        (False, 0, "context creation failed: x\nPASS", "context creation failed"),
        (True, 1, "error", None),
        (True, 0, "", "expected a failure"),
    ],
)
def test_a_run_passes_only_when_it_exits_as_meant_and_says_pass(
    tmp_path: Path, fails: bool, code: int | None, output: str, problem: str | None
) -> None:
    script = tmp_path / "client.py"
    script.write_text('print("PASS: infer")\n')
    case = examples.Case("c", "client.py", [], fails=fails)
    problems = examples.judge(case, script, code, output)
    if problem is None:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems


def test_list_names_the_cases_and_the_clients_not_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert examples.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "simple_grpc_sequence_stream_infer_client[dyna]" in out
    assert "simple_grpc_cudashm_client.py: CUDA shared memory" in out


def test_a_run_without_the_git_dirs_says_what_is_missing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRITON_CLIENT_GIT", raising=False)
    monkeypatch.delenv("TRITON_SERVER_GIT", raising=False)
    assert examples.main([]) == 2
    assert "--client-git and --server-git" in capsys.readouterr().err


@pytest.mark.slow
def test_triton_example_clients_pass_against_repokit_on_both_transports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dirs = [os.environ.get("TRITON_CLIENT_GIT"), os.environ.get("TRITON_SERVER_GIT")]
    if not all(dirs):
        pytest.skip("needs $TRITON_CLIENT_GIT and $TRITON_SERVER_GIT (git dirs of Triton's repos)")
    json_path = tmp_path / "results.json"
    code = examples.main(
        ["--grpc-transport", "both", "--workdir", str(tmp_path), "--json", str(json_path)]
    )
    out = capsys.readouterr().out
    sys.stdout.write(out)
    assert code == 0, out
    results = json.loads(json_path.read_text())
    assert set(results) == {"native", "grpcio"}
    for outcomes in results.values():
        assert sorted(o["case"] for o in outcomes) == sorted(c.name for c in examples.CASES)
        assert [o for o in outcomes if o["result"] != "PASS"] == []
