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
        p.name: p.read_text() for p in GENERATED.iterdir() if p.name.endswith((".py", ".pyi"))
    }
    committed = {k: v for k, v in committed.items() if not k.startswith("_")}
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
