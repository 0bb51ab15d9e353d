"""ONNX models on the CPU with onnxruntime.

Loads ``<version_dir>/<default_model_filename or model.onnx>`` (a file, or a directory holding
``model.onnx``) into one ``InferenceSession`` per instance. A batch of requests is concatenated
along dimension 0 once per input, run once, and the outputs are split back per request.
``session.run`` releases the GIL, so it runs on a per-backend thread pool with one thread per
instance while the event loop keeps serving; but an instance whose runs keep finishing within
``INLINE_BELOW_NS`` runs on the event loop itself, where the thread hop would cost more than the
run (for a model like add_sub_onnx, less than half the CPU per request; figures in
``benchmarks/README.md``).

Config parameters honoured (as Triton's onnxruntime backend): ``intra_op_thread_count``
(default 1 per instance, so instances do not oversubscribe the cores) and
``inter_op_thread_count``. Config ``reshape`` is applied both ways: request tensors are reshaped
to the model's shape and outputs back to the config dims. At load time the config's names,
datatypes and dims (or reshapes) are checked against the model's as Triton's backend checks them
(``shape_problem``); a contradiction refuses the model with Triton's message.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import accumulate
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from repokit.backends.base import (
    Backend,
    BackendRequest,
    BackendResult,
    ModelContext,
    Timing,
    instance_count,
)
from repokit.config.onnx_io import DEFAULT_MAX_BATCH_SIZE
from repokit.config.onnx_shapes import shape_problem
from repokit.errors import Code, RepokitError
from repokit.protocol import datatypes
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.types import InferTensor

_ORT_TYPES: dict[str, str] = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
    "tensor(bfloat16)": "BF16",
}


# A run shorter than this costs less on the event loop than the thread hop it saves (a wake of
# the pool thread, a GIL hand-off and a wake of the loop: several times what add_sub_onnx's own
# session.run takes; figures in benchmarks/README.md).
INLINE_BELOW_NS = 150_000
INLINE_AFTER_RUNS = 8


def _ort_error(exc: Exception) -> RepokitError:
    return RepokitError(Code.INTERNAL, f"onnx runtime error: {exc}")


def _parameter(config: mc.ModelConfig, key: str) -> int | None:
    if key not in config.parameters:
        return None
    text = config.parameters[key].string_value
    try:
        return int(text)
    except ValueError:
        raise RepokitError(
            Code.INVALID_ARG,
            f"failed to convert '{key}' parameter value '{text}' to an integer for model "
            f"'{config.name}'",
        ) from None


def model_path(context: ModelContext) -> Path:
    name = context.config.default_model_filename or "model.onnx"
    path = context.version_dir / name
    if path.is_dir():
        path = path / "model.onnx"
    return path


class OnnxRuntimeBackend(Backend):
    updates_instances = True  # add_instances / remove_instances (one session each)

    def __init__(self, context: ModelContext) -> None:
        super().__init__(context)
        self._sessions: list[Any] = []
        self._executor: ThreadPoolExecutor | None = None
        self._default_max_batch_size = DEFAULT_MAX_BATCH_SIZE
        self._configure(context.config)
        # per instance: runs in a row that took < INLINE_BELOW_NS; no executor run in flight
        self._quick = [0] * self._count
        self._inline = [True] * self._count

    def _configure(self, config: mc.ModelConfig) -> None:
        """Derive the per-request tables from the (possibly auto-completed) config."""
        self._count = instance_count(config)
        self._batching = config.max_batch_size > 0
        self._reshape_in = {
            i.name: tuple(i.reshape.shape) for i in config.input if i.HasField("reshape")
        }
        self._reshape_out = {o.name: tuple(o.dims) for o in config.output if o.HasField("reshape")}
        self._output_types = {o.name: datatypes.protocol_name(o.data_type) for o in config.output}
        self._all_outputs = tuple(o.name for o in config.output)

    @property
    def instance_count(self) -> int:
        return self._count

    def configure(self, settings: dict[str, str]) -> None:
        """``--backend-config [onnxruntime,]default-max-batch-size=N``: the max_batch_size
        autofill gives a model that can batch and whose config sets none (Triton's default
        is 4; 0 or less: no batching)."""
        text = settings.get("default-max-batch-size")
        if text is None:
            return
        try:
            self._default_max_batch_size = int(text.strip())
        except ValueError:
            raise ValueError(f"default-max-batch-size must be an integer, got '{text}'") from None

    # --- load / unload --------------------------------------------------------------------
    async def load(self) -> None:
        path = model_path(self.context)
        if not path.is_file():
            raise RepokitError(
                Code.UNAVAILABLE,
                f"unable to find '{path}' for model instance '{self.context.name}_0'",
            )
        config = self.context.config
        if self.on_config_completed is not None and not (config.input and config.output):
            self._auto_complete(path)
        self._executor = ThreadPoolExecutor(
            max_workers=self._count, thread_name_prefix=f"ort-{self.context.name}"
        )
        loop = asyncio.get_running_loop()
        try:
            for _ in range(self._count):
                session = await loop.run_in_executor(self._executor, self._new_session, path)
                self._sessions.append(session)
            self._check_io(self._sessions[0])
            if not self._all_outputs:
                self._all_outputs = tuple(o.name for o in self._sessions[0].get_outputs())
        except BaseException:
            await self.unload()
            raise

    def _auto_complete(self, path: Path) -> None:
        """Fill inputs, outputs and max_batch_size from the model file, as Triton's onnxruntime
        backend does when the config leaves them out (autofill on, the default)."""
        from google.protobuf import json_format

        from repokit.config.onnx_io import (
            OnnxModelError,
            autocomplete_onnx_config,
            read_onnx_signature,
        )

        try:
            signature = read_onnx_signature(path)
        except OnnxModelError as exc:
            raise RepokitError(Code.INTERNAL, str(exc)) from None
        completed = mc.ModelConfig()
        completed.CopyFrom(self.context.config)
        filled, failure = autocomplete_onnx_config(
            completed, signature, self._default_max_batch_size
        )
        if failure:
            raise RepokitError(Code.INVALID_ARG, failure)
        adopt = self.on_config_completed
        if filled and adopt is not None:
            text = json_format.MessageToJson(completed, preserving_proto_field_name=True)
            self.context = adopt(text)
            self._configure(self.context.config)

    def _new_session(self, path: Path) -> Any:
        try:
            import onnxruntime as ort
        except ImportError:
            raise RepokitError(
                Code.UNAVAILABLE,
                "onnxruntime is not installed; install it with `pip install onnxruntime`",
            ) from None
        config = self.context.config
        options = ort.SessionOptions()
        intra = _parameter(config, "intra_op_thread_count")
        inter = _parameter(config, "inter_op_thread_count")
        options.intra_op_num_threads = 1 if intra is None else intra
        if inter is not None:
            options.inter_op_num_threads = inter
        try:
            return ort.InferenceSession(
                str(path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise _ort_error(exc) from None

    def _check_io(self, session: Any) -> None:
        """Config names and datatypes must match the model's (Triton's load-time checks)."""
        model = self.context.name
        sides = (
            ("input", self.context.config.input, session.get_inputs()),
            ("output", self.context.config.output, session.get_outputs()),
        )
        for side, declared, actual in sides:
            by_name = {a.name: a for a in actual}
            for tensor in declared:
                found = by_name.get(tensor.name)
                if found is None:
                    allowed = ", ".join(sorted(by_name))
                    raise RepokitError(
                        Code.INVALID_ARG,
                        f"unable to load model '{model}', unexpected {side} '{tensor.name}' in "
                        f"the configuration; the model's {side}s are: {allowed}",
                    )
                expected = datatypes.protocol_name(tensor.data_type)
                provided = _ORT_TYPES.get(found.type, found.type)
                if provided != expected:
                    raise RepokitError(
                        Code.INVALID_ARG,
                        f"unable to load model '{model}', configuration expects datatype "
                        f"{datatypes.BY_PROTOCOL[expected].config_name} for {side} "
                        f"'{tensor.name}', model provides {provided}",
                    )
                problem = shape_problem(self.context.config, side, tensor, _ort_shape(found))
                if problem:
                    raise RepokitError(Code.INVALID_ARG, problem)

    async def add_instances(self, names: list[str]) -> list[int]:
        """A session more per name (ids after the existing ones); the executor gets a thread
        for each."""
        if self._executor is None:
            raise RepokitError(Code.UNAVAILABLE, f"model '{self.context.name}' is not loaded")
        path = model_path(self.context)
        loop = asyncio.get_running_loop()
        sessions = [
            await loop.run_in_executor(self._executor, self._new_session, path) for _ in names
        ]
        first = len(self._sessions)
        self._sessions.extend(sessions)
        self._quick.extend([0] * len(sessions))
        self._inline.extend([True] * len(sessions))
        self._resize(self._count + len(sessions))
        return list(range(first, first + len(sessions)))

    async def remove_instances(self, instances: list[int]) -> None:
        """Drop these sessions (their ids stay taken: nothing runs on them any more)."""
        for instance in instances:
            self._sessions[instance] = None
        self._resize(self._count - len(instances))

    def _resize(self, count: int) -> None:
        """``count`` instances: an executor with a thread for each (the old one finishes the
        runs it has)."""
        self._count = count
        old = self._executor
        self._executor = ThreadPoolExecutor(
            max_workers=max(1, count), thread_name_prefix=f"ort-{self.context.name}"
        )
        if old is not None:
            old.shutdown(wait=False)

    async def unload(self) -> None:
        self._sessions.clear()
        if self._executor is not None:
            executor, self._executor = self._executor, None
            await asyncio.to_thread(executor.shutdown, wait=True)

    # --- execute --------------------------------------------------------------------------
    async def execute(
        self, instance: int, requests: list[BackendRequest]
    ) -> tuple[list[BackendResult], Timing]:
        if self._executor is None or not self._sessions:
            error = RepokitError(Code.UNAVAILABLE, f"model '{self.context.name}' is not loaded")
            return [BackendResult(error=error) for _ in requests], Timing()
        index = instance % len(self._sessions)
        session = self._sessions[index]
        if self._inline[index] and self._quick[index] >= INLINE_AFTER_RUNS:
            results, timing = self._run_batch(session, requests)
        else:
            loop = asyncio.get_running_loop()
            self._inline[index] = False  # one executor run at a time per instance
            try:
                results, timing = await loop.run_in_executor(
                    self._executor, self._run_batch, session, requests
                )
            finally:
                self._inline[index] = True
        # a model that runs within INLINE_BELOW_NS (INLINE_AFTER_RUNS times in a row) runs on
        # the event loop from then on; one slower run sends it back to the thread pool
        if timing.compute_infer_ns < INLINE_BELOW_NS:
            self._quick[index] += 1
        else:
            self._quick[index] = 0
        return results, timing

    def _run_batch(
        self, session: Any, requests: list[BackendRequest]
    ) -> tuple[list[BackendResult], Timing]:
        if len(requests) > 1 and not (self._batching and _same_item_shapes(requests)):
            results: list[BackendResult] = []
            total = Timing()
            for request in requests:
                (result,), timing = self._run_batch(session, [request])
                results.append(result)
                total = Timing(
                    total.compute_input_ns + timing.compute_input_ns,
                    total.compute_infer_ns + timing.compute_infer_ns,
                    total.compute_output_ns + timing.compute_output_ns,
                )
            return results, total
        t0 = time.perf_counter_ns()
        feed = self._feed(requests)
        wanted = self._wanted_outputs(requests)
        t1 = time.perf_counter_ns()
        try:
            produced = session.run(list(wanted), feed)
        except Exception as exc:
            error = _ort_error(exc)
            return [BackendResult(error=error) for _ in requests], Timing(t1 - t0)
        t2 = time.perf_counter_ns()
        results = self._split(requests, dict(zip(wanted, produced, strict=True)))
        t3 = time.perf_counter_ns()
        return results, Timing(t1 - t0, t2 - t1, t3 - t2)

    def _feed(self, requests: list[BackendRequest]) -> dict[str, npt.NDArray[Any]]:
        feed: dict[str, npt.NDArray[Any]] = {}
        for name, first in requests[0].inputs.items():
            if len(requests) == 1:
                array = first.data
            else:
                array = np.concatenate([r.inputs[name].data for r in requests], axis=0)
            target = self._reshape_in.get(name)
            if target is not None:
                batch = (array.shape[0],) if self._batching and array.ndim > 0 else ()
                array = array.reshape(batch + target)
            if first.datatype == "BYTES":
                array = _strings_for_ort(array)
            feed[name] = array
        return feed

    def _wanted_outputs(self, requests: list[BackendRequest]) -> tuple[str, ...]:
        asked: set[str] = set()
        for request in requests:
            if not request.requested_outputs:
                return self._all_outputs
            asked.update(request.requested_outputs)
        known = tuple(name for name in self._all_outputs if name in asked)
        if len(known) == len(asked):
            return known
        # names the config does not list: the sequence batcher's implicit state outputs
        return known + tuple(sorted(asked.difference(known)))

    def _split(
        self, requests: list[BackendRequest], produced: dict[str, npt.NDArray[Any]]
    ) -> list[BackendResult]:
        bounds = [0, *accumulate(_batch_size(r) for r in requests)]
        per_request: list[list[InferTensor]] = [[] for _ in requests]
        for name, array in produced.items():
            datatype = self._output_types.get(name, "BYTES" if array.dtype == object else "")
            if array.dtype == object:
                array = _strings_from_ort(array)
            if not datatype:
                found = datatypes.from_numpy(array.dtype)
                datatype = found.protocol if found is not None else "BYTES"
            pieces = (
                [array[bounds[i] : bounds[i + 1]] for i in range(len(requests))]
                if len(requests) > 1
                else [array]
            )
            for index, piece in enumerate(pieces):
                dims = self._reshape_out.get(name)
                if dims is not None:
                    batch = (piece.shape[0],) if self._batching and piece.ndim > 0 else ()
                    piece = piece.reshape(batch + dims)
                per_request[index].append(
                    InferTensor(name=name, datatype=datatype, shape=piece.shape, data=piece)
                )
        results = []
        for request, outputs in zip(requests, per_request, strict=True):
            wanted = set(request.requested_outputs)
            if wanted:
                outputs = [t for t in outputs if t.name in wanted]
            results.append(BackendResult(outputs=outputs))
        return results


def _ort_shape(node: Any) -> tuple[int, ...]:
    """The model's shape of an input or output as onnxruntime reports it: a symbolic or
    unknown dimension is -1, a tensor whose rank the model does not record is a scalar."""
    return tuple(d if isinstance(d, int) else -1 for d in (node.shape or ()))


def _batch_size(request: BackendRequest) -> int:
    for tensor in request.inputs.values():
        return int(tensor.data.shape[0]) if tensor.data.ndim > 0 else 1
    return 1


def _same_item_shapes(requests: list[BackendRequest]) -> bool:
    first = requests[0].inputs
    for request in requests[1:]:
        if request.inputs.keys() != first.keys():
            return False
        for name, tensor in request.inputs.items():
            if tensor.data.shape[1:] != first[name].data.shape[1:] or tensor.data.ndim == 0:
                return False
    return True


def _strings_for_ort(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    out = np.empty(array.shape, dtype=object)
    out.reshape(-1)[:] = [
        e.decode("utf-8", "replace") if isinstance(e, bytes) else str(e)
        for e in array.reshape(-1).tolist()
    ]
    return out


def _strings_from_ort(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    out = np.empty(array.shape, dtype=object)
    out.reshape(-1)[:] = [
        e.encode("utf-8") if isinstance(e, str) else bytes(e) for e in array.reshape(-1).tolist()
    ]
    return out
