"""The instance process of a python-backend model (Triton's "stub"): ``python -m ... <fd>``.

It registers :mod:`repokit.backends.python.pb_utils` as ``triton_python_backend_utils``, imports
the model file, and then answers framed messages (:mod:`repokit.backends.python.ipc`) on the
inherited socket ``fd``:

- ``("init", {...})``: run ``auto_complete_config`` (if asked and defined) and ``initialize``;
- ``("execute", [batch, ...])``: for each batch (a list of requests) in turn, run ``execute``
  once (a coroutine is run to completion) and check the responses as Triton does. The server
  sends every batch that queued up for this instance while it was busy in one message; each
  still gets its own ``execute`` call, so the model sees exactly the batches the scheduler
  formed. The reply lists one ``(status, payload, (input_ns, infer_ns, output_ns))`` per batch,
  timed here: building the pb_utils requests, ``execute``, converting the responses;
- ``("finalize", None)``: run ``finalize`` and exit.

Replies are ``("ok", payload)`` or ``("error", message)``. Tensors travel packed
(:func:`repokit.backends.python.ipc.pack_array`). Exceptions from model code, including
``SystemExit``, are formatted as Triton's stub formats them (``Type: message`` plus an ``At:``
list of frames, innermost first). Only numpy and the standard library are imported here.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from repokit.backends.python import ipc, pb_utils

_THIS_FILE = str(Path(__file__).resolve())
# request tuple: (inputs [(name, packed array)], requested output names, id, correlation id,
# flags, parameters JSON)
RequestTuple = tuple[list[tuple[str, Any]], tuple[str, ...], str, "int | str", int, str]
BatchReply = tuple[str, Any, tuple[int, int, int]]


def format_exception(exc: BaseException) -> str:
    """``Type: message`` and the model's frames, innermost first (as pybind11 prints them)."""
    text = f"{type(exc).__name__}: {exc}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != _THIS_FILE]
    if not frames:
        return text
    lines = "".join(f"  {f.filename}({f.lineno}): {f.name}\n" for f in reversed(frames))
    return f"{text}\n\nAt:\n{lines}"


class Instance:
    def __init__(self) -> None:
        self.model: Any = None
        self.name = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dtypes: dict[str, Any] = {}

    def _run(self, result: Any) -> Any:
        if inspect.isawaitable(result):
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            return self._loop.run_until_complete(result)
        return result

    # --- init --------------------------------------------------------------------------------
    def init(self, payload: dict[str, Any]) -> tuple[str, Any]:
        args: dict[str, str] = payload["args"]
        self.name = args["model_instance_name"]
        try:
            module = self._import(Path(payload["model_file"]))
            model_class = getattr(module, "TritonPythonModel", None)
            if model_class is None:
                return "error", (
                    f"TritonPythonModel class not found in {payload['model_file']}; a python "
                    "model must define class TritonPythonModel"
                )
            config_json = None
            complete = getattr(model_class, "auto_complete_config", None)
            if payload.get("auto_complete") and complete is not None:
                completed = complete(pb_utils.ModelConfig(args["model_config"]))
                if isinstance(completed, pb_utils.ModelConfig):
                    import json

                    config_json = json.dumps(completed.as_dict())
                    args = {**args, "model_config": config_json}
            self.model = model_class()
            initialize = getattr(self.model, "initialize", None)
            if initialize is not None:
                self._run(initialize(args))
        except BaseException as exc:
            return "error", format_exception(exc)
        return "ok", {"config": config_json}

    @staticmethod
    def _import(path: Path) -> Any:
        version_dir = str(path.parent)
        if version_dir not in sys.path:
            sys.path.insert(0, version_dir)
        spec = importlib.util.spec_from_file_location("model", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import the model file {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules["model"] = module
        spec.loader.exec_module(module)
        return module

    # --- execute -----------------------------------------------------------------------------
    def execute(self, batch: list[RequestTuple]) -> BatchReply:
        started = time.perf_counter_ns()
        dtypes = self._dtypes
        requests = [
            pb_utils.InferenceRequest(
                inputs=[pb_utils.Tensor(name, ipc.unpack_array(a, dtypes)) for name, a in inputs],
                requested_output_names=requested,
                request_id=request_id,
                correlation_id=correlation_id,
                flags=flags,
                parameters=parameters,
            )
            for inputs, requested, request_id, correlation_id, flags, parameters in batch
        ]
        built = time.perf_counter_ns()
        try:
            responses = self._run(self.model.execute(requests))
            problem = self._check(responses, len(requests))
        except BaseException as exc:
            problem = format_exception(exc)
        executed = time.perf_counter_ns()
        if problem is not None:
            message = (
                f"Failed to process the request(s) for model '{self.name}', message: {problem}"
            )
            return "error", message, (built - started, executed - built, 0)
        results = [
            self._result(response, request.requested_output_names())
            for response, request in zip(responses, requests, strict=True)
        ]
        finished = time.perf_counter_ns()
        return "ok", results, (built - started, executed - built, finished - executed)

    @staticmethod
    def _check(responses: Any, count: int) -> str | None:
        if responses is None:
            return (
                "execute() returned None; a model that is not decoupled must return a list "
                "with one InferenceResponse per request (repokit does not support response "
                "senders)"
            )
        if not isinstance(responses, (list, tuple)):
            return (
                "execute() must return a list of InferenceResponse objects, got "
                f"'{type(responses)}'"
            )
        if len(responses) != count:
            return (
                "Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{count}, and "
                f"InferenceResponse(s) size is:{len(responses)}\n"
            )
        for response in responses:
            if not isinstance(response, pb_utils.InferenceResponse):
                return (
                    "Expected an 'InferenceResponse' object in the execute function return "
                    f"list, found type '{type(response)}'."
                )
        return None

    @staticmethod
    def _result(response: pb_utils.InferenceResponse, requested: set[str]) -> tuple[Any, ...]:
        error = response.error()
        if error is not None:
            return ("error", error.code_name(), error.message())
        outputs = [
            (t.name(), ipc.pack_array(t.as_numpy()))
            for t in response.output_tensors()
            if t.name() in requested
        ]
        return ("ok", outputs, response.parameter_dict())

    def finalize(self) -> None:
        finalize = getattr(self.model, "finalize", None)
        if finalize is not None:
            try:
                self._run(finalize())
            except BaseException as exc:
                sys.stderr.write(f"finalize of '{self.name}' failed: {format_exception(exc)}\n")


def _send_reply(channel: ipc.BlockingChannel, instance: Instance, op: str, reply: Any) -> None:
    """Send ``reply``; a result that cannot be pickled fails only its own batch."""
    try:
        channel.send(reply)
        return
    except BaseException as exc:  # e.g. an output object array holding unpicklable objects
        problem = exc
    if op == "execute" and reply[0] == "ok":
        batches = []
        for batch_reply in reply[1]:
            try:
                ipc.encode(batch_reply)
            except BaseException as exc:
                batch_reply = ("error", _unsendable(instance, exc), batch_reply[2])
            batches.append(batch_reply)
        channel.send(("ok", batches))
    else:
        channel.send(("error", _unsendable(instance, problem)))


def _unsendable(instance: Instance, exc: BaseException) -> str:
    return (
        f"Failed to process the request(s) for model '{instance.name}', message: "
        f"{format_exception(exc)}"
    )


def serve(sock: socket.socket) -> None:
    channel = ipc.BlockingChannel(sock)
    instance = Instance()
    while True:
        try:
            op, payload = channel.recv()
        except ipc.ChannelClosed:
            return
        if op == "execute":
            reply: tuple[str, Any] = ("ok", [instance.execute(batch) for batch in payload])
        elif op == "init":
            reply = instance.init(payload)
        elif op == "finalize":
            instance.finalize()
            channel.send(("ok", None))
            return
        else:
            reply = ("error", f"unknown operation {op!r}")
        _send_reply(channel, instance, op, reply)


def main(argv: list[str]) -> int:
    sys.modules["triton_python_backend_utils"] = pb_utils
    sock = socket.socket(fileno=int(argv[1]))
    try:
        serve(sock)
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
