"""The generated protobuf code matches protos/, and coexists with tritonclient.grpc."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from repokit.protocol.codegen import generate_sources, project_root

GENERATED = project_root() / "repokit" / "protocol" / "generated"


def test_generated_code_matches_protos() -> None:
    fresh = generate_sources(project_root() / "protos")
    committed = {
        p.relative_to(GENERATED).as_posix(): p.read_text()
        for p in GENERATED.rglob("*")
        if p.name.endswith((".py", ".pyi")) and not p.name.startswith("_")
    }
    drifted = sorted(name for name in fresh if committed.get(name) != fresh[name])
    assert not drifted, f"generated code drifted from protos/ (run `nox -s generate`): {drifted}"
    assert set(committed) == set(fresh)


def test_imports_next_to_tritonclient_in_either_order(tmp_path: Path) -> None:
    script = """
import sys
order = sys.argv[1]
if order == "ours-first":
    from repokit.protocol.generated import grpc_service_pb2 as ours
    import tritonclient.grpc as tg
else:
    import tritonclient.grpc as tg
    from repokit.protocol.generated import grpc_service_pb2 as ours
from tritonclient.grpc import service_pb2 as theirs
req = ours.ModelInferRequest(model_name="m", raw_input_contents=[b"abc"])
back = theirs.ModelInferRequest.FromString(req.SerializeToString())
assert back.model_name == "m" and back.raw_input_contents[0] == b"abc"
assert ours.ModelInferRequest.DESCRIPTOR.full_name == "inference.ModelInferRequest"
print("ok")
"""
    for order in ("ours-first", "theirs-first"):
        out = subprocess.run(
            [sys.executable, "-c", script, order], capture_output=True, text=True, check=False
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "ok"


def test_model_config_has_current_fields() -> None:
    from repokit.protocol.generated import model_config_pb2 as mc

    fields = mc.ModelConfig.DESCRIPTOR.fields_by_name
    assert fields["runtime"].number == 25
    assert fields["model_metrics"].number == 26
    assert mc.DataType.Value("TYPE_BF16") == 14
    assert mc.ModelWarmup.DESCRIPTOR.fields_by_name["count"].number == 4
    seq = mc.ModelSequenceBatching.DESCRIPTOR.fields_by_name
    assert seq["state"].number == 5 and seq["iterative_sequence"].number == 6
    assert mc.ModelEnsembling.DESCRIPTOR.fields_by_name["max_inflight_requests"].number == 2


def test_v1_protos_have_the_legacy_field_numbers() -> None:
    from repokit.protocol.generated.v1 import api_pb2, request_status_pb2, server_status_pb2

    req = api_pb2.InferRequestHeader.DESCRIPTOR
    assert req.full_name == "nvidia.inferenceserver.InferRequestHeader"
    numbers = {f.name: f.number for f in req.fields}
    assert numbers == {
        "id": 5, "flags": 6, "correlation_id": 4, "batch_size": 1, "input": 2, "output": 3,
        "priority": 7, "timeout_microseconds": 8,
    }  # fmt: skip
    assert api_pb2.InferRequestHeader.FLAG_SEQUENCE_END == 2
    assert {f.name: f.number for f in api_pb2.InferRequestHeader.Output.DESCRIPTOR.fields} == {
        "name": 1, "cls": 3, "shared_memory": 4,
    }  # fmt: skip
    out = api_pb2.InferResponseHeader.Output.DESCRIPTOR
    assert {f.name: f.number for f in out.fields} == {
        "name": 1, "data_type": 4, "raw": 2, "batch_classes": 3,
    }  # fmt: skip
    status = request_status_pb2.RequestStatus.DESCRIPTOR
    assert {f.name: f.number for f in status.fields} == {
        "code": 1, "msg": 2, "server_id": 3, "request_id": 4,
    }  # fmt: skip
    assert request_status_pb2.RequestStatusCode.Value("ALREADY_EXISTS") == 8
    server = server_status_pb2.ServerStatus.DESCRIPTOR.fields_by_name
    assert server["ready_state"].number == 7 and server["repository_stats"].number == 11
    assert server_status_pb2.ServerReadyState.Value("SERVER_FAILED_TO_INITIALIZE") == 10


def test_v1_modules_import_next_to_tritonclient(tmp_path: Path) -> None:
    script = """
import tritonclient.grpc as tg
from tritonclient.grpc import service_pb2 as theirs
from repokit.protocol.generated.v1 import grpc_service_pb2 as v1
from repokit.protocol.generated import grpc_service_pb2 as v2
req = v1.InferRequest(model_name="m", raw_input=[b"x"])
assert v1.InferRequest.FromString(req.SerializeToString()).raw_input == [b"x"]
assert v1.DESCRIPTOR.services_by_name["GRPCService"].full_name == (
    "nvidia.inferenceserver.GRPCService")
assert theirs.ModelInferRequest(model_name="m").model_name == "m"
assert v2.ModelInferRequest.DESCRIPTOR.full_name == "inference.ModelInferRequest"
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
