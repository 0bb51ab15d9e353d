"""Python backend: Triton python-backend models run in instance processes.

Error messages quoted here were checked against real Triton 2.51 serving the same models.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import numpy as np
import pytest

from repokit.backends.base import BackendResult
from repokit.backends.python.backend import PythonBackend
from repokit.backends.registry import create_backend
from repokit.errors import Code, RepokitError
from tests.backends.conftest import make_context, request

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
        {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
         {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ name: "{name}_0" kind: KIND_CPU count: {count} }} ]
"""

ADD_SUB = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
"""

A = np.arange(8, dtype=np.float32).reshape(2, 4)
B = np.ones((2, 4), dtype=np.float32)


async def load(
    tmp_path: Path, name: str, code: str, count: int = 1, **kwargs: float
) -> PythonBackend:
    context = make_context(
        tmp_path, name, CONFIG.format(name=name, count=count), {"model.py": code}
    )
    backend = create_backend(context)
    assert isinstance(backend, PythonBackend)
    if kwargs:
        backend = PythonBackend(context, **kwargs)
    await backend.load()
    return backend


async def load_error(tmp_path: Path, name: str, code: str, **kwargs: float) -> RepokitError:
    with pytest.raises(RepokitError) as info:
        await load(tmp_path, name, code, **kwargs)
    return info.value


async def run_one(backend: PythonBackend, instance: int = 0, **kwargs: object) -> BackendResult:
    (result,), _ = await backend.execute(instance, [request({"INPUT0": A, "INPUT1": B}, **kwargs)])
    return result


async def test_add_sub_on_every_instance(tmp_path: Path) -> None:
    backend = await load(tmp_path, "add_sub", ADD_SUB, count=2)
    assert backend.instance_count == 2 and backend.health()
    for instance in (0, 1):
        result = await run_one(backend, instance)
        assert result.error is None
        assert [t.name for t in result.outputs] == ["OUTPUT0", "OUTPUT1"]
        np.testing.assert_array_equal(result.outputs[0].data, A + B)
        np.testing.assert_array_equal(result.outputs[1].data, A - B)
        assert result.outputs[0].datatype == "FP32" and result.outputs[0].shape == (2, 4)
    only = await run_one(backend, 0, outputs=("OUTPUT1",))
    assert [t.name for t in only.outputs] == ["OUTPUT1"]
    pids = backend.describe()["pids"]
    await backend.unload()
    assert not backend.health()
    for pid in pids:  # the instance processes are gone
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_batch_of_requests_reaches_execute_together(tmp_path: Path) -> None:
    code = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        n = np.full((1, 4), len(requests), dtype=np.float32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", n)]) for _ in requests]
"""
    backend = await load(tmp_path, "batch", code)
    reqs = [request({"INPUT0": A, "INPUT1": B}) for _ in range(3)]
    results, timing = await backend.execute(0, reqs)
    assert [r.outputs[0].data[0, 0] for r in results] == [3, 3, 3]
    assert timing.compute_infer_ns > 0
    await backend.unload()


async def test_initialize_args_and_request_accessors(tmp_path: Path) -> None:
    code = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        config = json.loads(args["model_config"])
        self.out_type = pb_utils.get_output_config_by_name(config, "OUTPUT0")["data_type"]

    def execute(self, requests):
        responses = []
        for r in requests:
            info = {"args": self.args, "id": r.request_id(), "rid": r.get_request_id(),
                    "corr": r.correlation_id(), "flags": r.flags(),
                    "params": json.loads(r.parameters()),
                    "requested": sorted(r.requested_output_names()),
                    "cancelled": r.is_cancelled(), "out_type": self.out_type,
                    "np": str(pb_utils.triton_string_to_numpy(self.out_type))}
            text = np.array([json.dumps(info).encode()], dtype=object)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", text)], parameters={"seen": True}))
        return responses
"""
    backend = await load(tmp_path, "echo", code, count=2)
    result = await run_one(
        backend,
        1,
        request_id="abc",
        correlation_id="s7",
        flags=1,
        parameters={"custom": "x", "n": 3},
    )
    assert result.error is None and result.parameters == {"seen": True}
    assert result.outputs[0].datatype == "BYTES"
    info = json.loads(result.outputs[0].data[0])
    args = info.pop("args")
    assert json.loads(args.pop("model_config"))["name"] == "echo"
    assert args == {
        "model_instance_kind": "CPU",
        "model_instance_name": "echo_0_1",
        "model_instance_device_id": "0",
        "model_repository": str(tmp_path / "echo"),
        "model_version": "1",
        "model_name": "echo",
    }
    assert info == {
        "id": "abc",
        "rid": "abc",
        "corr": "s7",
        "flags": 1,
        "params": {"custom": "x", "n": 3},
        "requested": ["OUTPUT0", "OUTPUT1"],
        "cancelled": False,
        "out_type": "TYPE_FP32",
        "np": "<class 'numpy.float32'>",
    }
    await backend.unload()


async def test_async_execute_and_finalize(tmp_path: Path) -> None:
    marker = tmp_path / "finalized"
    code = f"""
import asyncio
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.sleep(0)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0",
                pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 2)])
                for r in requests]

    def finalize(self):
        open({str(marker)!r}, "w").write("done")
"""
    backend = await load(tmp_path, "async_model", code)
    result = await run_one(backend)
    np.testing.assert_array_equal(result.outputs[0].data, A * 2)
    await backend.unload()
    assert marker.read_text() == "done"


async def test_exception_in_execute_fails_the_batch_like_triton(tmp_path: Path) -> None:
    code = (
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        raise ValueError('boom in execute')\n"
    )
    backend = await load(tmp_path, "raise_exec", code)
    result = await run_one(backend)
    assert result.error is not None and result.error.code is Code.INTERNAL
    model_file = tmp_path / "raise_exec" / "1" / "model.py"
    assert result.error.message == (
        "Failed to process the request(s) for model 'raise_exec_0_0', message: "
        f"ValueError: boom in execute\n\nAt:\n  {model_file}(3): execute\n"
    )
    assert backend.health()  # the instance survives and keeps serving
    assert (await run_one(backend)).error is not None
    await backend.unload()


async def test_wrong_number_of_responses(tmp_path: Path) -> None:
    code = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        r = pb_utils.InferenceResponse(output_tensors=[])
        return [r, r]
"""
    backend = await load(tmp_path, "wrong_count", code)
    result = await run_one(backend)
    assert result.error is not None and result.error.code is Code.INTERNAL
    assert result.error.message == (
        "Failed to process the request(s) for model 'wrong_count_0_0', message: Number of "
        "InferenceResponse objects do not match the number of InferenceRequest objects. "
        "InferenceRequest(s) size is:1, and InferenceResponse(s) size is:2\n"
    )
    await backend.unload()


async def test_wrong_response_type_and_none(tmp_path: Path) -> None:
    code = """
class TritonPythonModel:
    def execute(self, requests):
        if requests[0].request_id() == "none":
            return None
        return ["not a response" for r in requests]
"""
    backend = await load(tmp_path, "wrong_type", code)
    result = await run_one(backend)
    assert result.error is not None and result.error.message == (
        "Failed to process the request(s) for model 'wrong_type_0_0', message: Expected an "
        "'InferenceResponse' object in the execute function return list, found type "
        "'<class 'str'>'."
    )
    none = await run_one(backend, request_id="none")
    assert none.error is not None and none.error.code is Code.INTERNAL
    assert "execute() returned None" in none.error.message
    await backend.unload()


async def test_triton_error_response_keeps_message_and_code(tmp_path: Path) -> None:
    code = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            if r.request_id() == "missing":
                err = pb_utils.TritonError("not here", pb_utils.TritonError.NOT_FOUND)
            else:
                err = pb_utils.TritonError("bad thing happened")
            out.append(pb_utils.InferenceResponse(output_tensors=[], error=err))
        return out
"""
    backend = await load(tmp_path, "triton_error", code)
    default = await run_one(backend)
    assert default.error is not None
    assert (default.error.code, default.error.message) == (Code.INTERNAL, "bad thing happened")
    missing = await run_one(backend, request_id="missing")
    assert missing.error is not None
    assert (missing.error.code, missing.error.message) == (Code.NOT_FOUND, "not here")
    await backend.unload()


async def test_exception_in_initialize_fails_load(tmp_path: Path) -> None:
    code = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("cannot start")

    def execute(self, requests):
        return []
"""
    error = await load_error(tmp_path, "raise_init", code)
    model_file = tmp_path / "raise_init" / "1" / "model.py"
    assert error.code is Code.INTERNAL
    assert error.message == f"RuntimeError: cannot start\n\nAt:\n  {model_file}(4): initialize\n"


async def test_sys_exit_in_initialize_fails_load_only(tmp_path: Path) -> None:
    code = (
        "import sys\n\n\nclass TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        sys.exit(3)\n"
    )
    error = await load_error(tmp_path, "exit_init", code)
    model_file = tmp_path / "exit_init" / "1" / "model.py"
    assert error.code is Code.INTERNAL
    assert error.message == f"SystemExit: 3\n\nAt:\n  {model_file}(6): initialize\n"


async def test_process_dying_in_initialize_and_import_errors(tmp_path: Path) -> None:
    died = await load_error(tmp_path, "die", "import os\nos._exit(7)\n")
    assert died.code is Code.INTERNAL
    assert died.message.startswith(  # Triton's text, then how the process ended
        "Stub process 'die_0_0' is not healthy. (It exited with code 7 during initialize"
    )
    missing = await load_error(tmp_path, "no_class", "x = 1\n")
    assert "TritonPythonModel class not found" in missing.message
    broken = await load_error(tmp_path, "broken", "import not_a_module_anywhere\n")
    assert broken.message.startswith("ModuleNotFoundError: No module named 'not_a_module_anywhere'")


async def test_hanging_initialize_times_out(tmp_path: Path) -> None:
    code = (
        "import time\n\n\nclass TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        time.sleep(60)\n"
    )
    # without auto_complete_config the process's start and imports are part of the initialize
    # exchange: whatever they take on a loaded machine, the limit runs out in initialize (with
    # auto_complete_config first, they ran past 4 s in it in 3 of 3 runs under load)
    error = await load_error(tmp_path, "hang_init", code, init_timeout_s=4, auto_complete=False)
    assert error.code is Code.INTERNAL
    assert error.message == (
        "python model instance 'hang_init_0_0' did not finish initialize within 4 s"
    )


async def test_missing_model_file(tmp_path: Path) -> None:
    context = make_context(tmp_path, "nofile", CONFIG.format(name="nofile", count=1), {})
    with pytest.raises(RepokitError) as info:
        await create_backend(context).load()
    assert info.value.code is Code.UNAVAILABLE and "model.py" in info.value.message


async def test_crash_in_execute_fails_the_request(tmp_path: Path) -> None:
    code = ADD_SUB.replace("responses = []", "import ctypes; ctypes.string_at(0)")
    backend = await load(tmp_path, "segv_exec", code, count=2)
    result = await run_one(backend, 1)
    assert result.error is not None and result.error.code is Code.INTERNAL
    assert result.error.message == "Stub process 'segv_exec_0_1' is not healthy."
    assert not backend.health()
    again = await run_one(backend, 1)
    assert again.error is not None and again.error.message == result.error.message
    await backend.unload()


async def test_hanging_execute_does_not_block_others_and_unload_kills_it(
    tmp_path: Path,
) -> None:
    code = ADD_SUB.replace("responses = []", "import time; time.sleep(60)")
    backend = await load(tmp_path, "hang_exec", code, finalize_timeout_s=0.2)
    fast = await load(tmp_path, "fast", ADD_SUB)
    stuck = asyncio.ensure_future(run_one(backend))
    await asyncio.sleep(0)
    assert (await run_one(fast)).error is None  # the event loop keeps serving
    await backend.unload()
    result = await stuck
    assert result.error is not None and "is not healthy" in result.error.message
    await fast.unload()


async def test_large_tensor_round_trip(tmp_path: Path) -> None:
    code = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0",
                pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
"""
    backend = await load(tmp_path, "identity", code)
    big = np.random.default_rng(0).random((1, 262_144), dtype=np.float32)
    (result,), _ = await backend.execute(0, [request({"INPUT0": big})])
    np.testing.assert_array_equal(result.outputs[0].data, big)
    strings = np.array([b"a", b"\x00\xff", "é".encode()], dtype=object)
    (result,), _ = await backend.execute(0, [request({"INPUT0": strings})])
    assert result.outputs[0].datatype == "BYTES"
    assert result.outputs[0].data.tolist() == strings.tolist()
    await backend.unload()


async def test_auto_complete_config_result_is_kept(tmp_path: Path) -> None:
    code = (
        ADD_SUB
        + """
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input(
            {"name": "EXTRA", "data_type": "TYPE_INT32", "dims": [1]})
        return auto_complete_model_config
"""
    )
    backend = await load(tmp_path, "auto", code, count=2)
    assert backend.completed_config_json is not None
    names = [i["name"] for i in json.loads(backend.completed_config_json)["input"]]
    assert names == ["INPUT0", "INPUT1", "EXTRA"]
    await backend.unload()
    failing = code.replace('"TYPE_INT32", "dims": [1]', '"TYPE_INT32", "dims": [1], "x": 1')
    error = await load_error(tmp_path / "f", "auto", failing)
    assert error.code is Code.INTERNAL
    assert error.message.startswith("ValueError: input 'EXTRA' in auto-complete-config")
    no_return = code.replace("        return auto_complete_model_config\n", "")
    error = await load_error(tmp_path / "n", "auto", no_return)
    assert error.code is Code.INTERNAL
    assert error.message == (  # Triton's text (L0_model_config autofill_noplatform/no_return)
        "auto_complete_config function in model 'auto' must return a valid pb.ModelConfig object."
    )


async def test_model_imports_its_folder_as_triton_does(tmp_path: Path) -> None:
    """As Triton's stub: ``import sibling`` (the version folder is on sys.path) and ``from .
    import other`` (the file is imported as ``1.model``) both work."""
    code = ADD_SUB.replace(
        "import triton_python_backend_utils as pb_utils\n",
        "import triton_python_backend_utils as pb_utils\nimport sibling\nfrom . import other\n"
        "assert __name__ == '1.model'\n",
    ).replace("a + b)", "a + b + sibling.ONE + other.TWO)")
    context = make_context(
        tmp_path,
        "multi",
        CONFIG.format(name="multi", count=1),
        {"model.py": code, "sibling.py": "ONE = 1\n", "other.py": "TWO = 2\n"},
    )
    backend = create_backend(context)
    await backend.load()
    try:
        result = await run_one(backend)  # type: ignore[arg-type]
        np.testing.assert_array_equal(result.outputs[0].data, A + B + 3)
    finally:
        await backend.unload()


async def test_models_see_no_command_line_arguments(tmp_path: Path) -> None:
    """As in Triton's stub (an embedded interpreter): sys.argv is [""], so a model that runs
    unittest.main("model", exit=False) runs its own tests, not a test named after an fd."""
    code = ADD_SUB.replace(
        "import triton_python_backend_utils as pb_utils\n",
        "import sys\nimport triton_python_backend_utils as pb_utils\nassert sys.argv == ['']\n",
    )
    backend = await load(tmp_path, "argv", code)
    try:
        assert (await run_one(backend)).error is None
    finally:
        await backend.unload()
