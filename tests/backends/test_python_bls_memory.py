"""Memory of a BLS round trip of a large tensor: a python model sends a 64 MiB FP32 tensor to a
python identity model with ``InferenceRequest.exec()`` and checks every value it gets back.

Peak memory is each process's ``VmHWM`` (reset through ``/proc/<pid>/clear_refs`` before the
request) above its resident size then, summed over the server (``repokit serve`` in its own
process) and both instance processes. The caller's own tensor and the response it reads are two
copies no transport can avoid. Before tensors went as shared-memory segments
(repokit.backends.python.segments) the server held both the request's and the response's tensor
and the called instance received one: 5 copies; with segments that the called instance copied
into a new one for its output, 3; passing its unwritten input segment on as the output, 2.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.limits.served import served

MIB = 1024 * 1024
SIZE = 64 * MIB
BOUND_COPIES = 3.0

CALLER = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            data = np.full((1, count), 1.5, dtype=np.float32)
            response = pb_utils.InferenceRequest(
                model_name="identity_fp32",
                inputs=[pb_utils.Tensor("INPUT0", data)],
                requested_output_names=["OUTPUT0"],
            ).exec()
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            got = pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()
            same = got.shape == data.shape and got.min() == 1.5 and got.max() == 1.5
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("SAME", np.array([same]))])
            )
        return responses
"""

IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        found = [pb_utils.get_input_tensor_by_name(r, "INPUT0") for r in requests]
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", t.as_numpy())]) for t in found
        ]
"""

CONFIGS = {
    "bls_caller": """
backend: "python"
input [ { name: "COUNT" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "SAME" data_type: TYPE_BOOL dims: [ 1 ] } ]
""",
    "identity_fp32": """
backend: "python"
max_batch_size: 64
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
""",
}


def _write_repository(root: Path) -> Path:
    for name, code in (("bls_caller", CALLER), ("identity_fp32", IDENTITY)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(code)
        (root / name / "config.pbtxt").write_text(f'name: "{name}"\n{CONFIGS[name]}')
    return root


def _status_bytes(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key} for process {pid}")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _call(url: str, count: int) -> bool:
    with grpcclient.InferenceServerClient(url) as client:
        value = grpcclient.InferInput("COUNT", [1], "INT64")
        value.set_data_from_numpy(np.array([count], dtype=np.int64))
        result = client.infer("bls_caller", [value], client_timeout=120)
        same = result.as_numpy("SAME")
        assert same is not None
        return bool(same[0])


def test_a_bls_round_trip_of_a_large_tensor_holds_fewer_than_three_copies(tmp_path: Path) -> None:
    repo = _write_repository(tmp_path / "models")
    with served(repo) as server:
        url = f"127.0.0.1:{server.grpc_port}"
        assert _call(url, 1024)  # everything imported and warm
        pids = [server.process.pid, *_children(server.process.pid)]
        assert len(pids) == 3, f"expected the server and two instance processes, got {pids}"
        baseline: dict[int, int] = {}
        for pid in pids:
            try:
                Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
            except OSError as exc:  # kernels before 4.0 cannot reset the peak
                pytest.fail(f"cannot reset the peak memory of process {pid}: {exc}")
            baseline[pid] = _status_bytes(pid, "VmRSS")
        assert _call(url, SIZE // 4)
        grown = {pid: _status_bytes(pid, "VmHWM") - baseline[pid] for pid in pids}
    copies = sum(grown.values()) / SIZE
    detail = ", ".join(f"pid {pid}: {grew / SIZE:.2f}" for pid, grew in grown.items())
    assert copies < BOUND_COPIES, f"{copies:.2f} copies of the tensor at peak ({detail})"
    assert copies >= 1.9, f"the measurement missed the caller's own tensors ({detail})"
