"""The instance process of a python-backend model (Triton's "stub"): ``python -m ... <fd> <fd>``.

It registers :mod:`repokit.backends.python.pb_utils` as ``triton_python_backend_utils``, imports
the model file, and then answers the operations of
:mod:`repokit.backends.python.messages` (framed by :mod:`repokit.backends.python.ipc`) on the
inherited socket ``fd``: ``AUTO_COMPLETE`` runs the model's ``auto_complete_config`` (the
server then starts every instance with the completed config), ``INIT`` its ``initialize``,
``FINALIZE`` its ``finalize`` (then the process exits), and ``EXECUTE`` runs ``execute`` once
per item, in order (a coroutine is run to completion), checking the responses as Triton does.
The server sends every batch that queued up for this instance while it was busy in one
message; each still gets its own ``execute`` call, so the model sees exactly the batches the
scheduler formed. The reply lists one ``BatchReply`` per item, timed here: building the
pb_utils requests, ``execute``, converting the responses.

Rescheduling: a request the model released with
``set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)`` during ``execute`` (read when
``execute`` returns; an ``async def execute`` of a decoupled model runs on without being
awaited, so its flags come too late and are ignored) is listed in the batch's reply, which is
then ``(RESCHEDULED, (results, indexes), timing)``: the server hands those requests back to
the sequence batcher. A non-decoupled model puts None in its response list for them (anything
else fails the batch with Triton's text); a decoupled one sends its responses so far without
the final flag. A request whose final response was sent is complete and stays so.

Decoupled models (``model_transaction_policy { decoupled: true }``) must return None from
``execute``; their responses go to the server as the model sends them through
``request.get_response_sender()`` (:mod:`repokit.backends.python.pb_bls`), from ``execute`` or
any thread, and an ``async def execute`` runs on a background event loop without being awaited
(as Triton does). If ``execute`` fails, every request whose sender is still open gets the
error as its final response. Non-decoupled models may also answer through senders (one
response each) and return None.

The socket is shared with BLS calls, log lines and metric updates of any thread
(:mod:`repokit.backends.python.child_link`); large tensors go as shared-memory segments whose
descriptors pass over the second socket, ``fd_socket`` (:mod:`repokit.backends.python.segments`).

Requests on the wire lane (:mod:`repokit.core.wire_lane`) come as their protocol bytes with the
model's plan, and the reply carries the encoded response (:mod:`.wire_grpc`, :mod:`.wire_http`).

Replies are ``(OK, payload)`` or ``(ERROR, message)``. Tensors travel packed
(:func:`repokit.backends.python.ipc.pack_array`). Exceptions from model code, including
``SystemExit``, are formatted as Triton's stub formats them (``Type: message`` plus an ``At:``
list of frames, innermost first). Only numpy and the standard library are imported here (the
wire lane's codecs import protobuf or orjson when their first request comes).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import inspect
import json
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from repokit.backends.python import ipc, pb_utils, wire_grpc, wire_http
from repokit.backends.python.child_link import ChildLink
from repokit.backends.python.messages import (
    AUTO_COMPLETE,
    BODY,
    ERROR,
    EXECUTE,
    FALLBACK,
    FELL_BACK,
    FINALIZE,
    INIT,
    NO_TIMING,
    OK,
    RESCHEDULED,
    SENT_LATER,
    WIRE,
    BatchReply,
    PackedResult,
    RequestBatch,
    RequestItem,
    Timing,
    WireItem,
    pack_model_response,
)
from repokit.backends.python.pb_runtime import RUNTIME
from repokit.backends.python.prefetch import Prefetcher
from repokit.backends.python.segments import FdSocket
from repokit.backends.wire_plan import WirePlan
from repokit.malloc_settings import keep_freed_memory

_OWN_DIR = str(Path(__file__).resolve().parent)


# a wire entry's request, as built: its codec module, the plan, the requested outputs and
# the request id (what encoding its response takes)
_WireCodec = tuple[Any, WirePlan, set[str], str]


@dataclass(frozen=True, slots=True)
class _Wired:
    """The wire entries of a batch (:data:`~.messages.WireEntryItem`): per built request its
    :data:`_WireCodec` or None (a request of the standard path), the batch positions the
    instance did not take (nothing runs for them) and the batch's size."""

    codecs: list[_WireCodec | None]
    fallbacks: list[int]
    size: int


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A batch whose requests the prefetch thread built, and how long that took."""

    requests: list[pb_utils.InferenceRequest]
    input_ns: int
    wired: _Wired | None = None


# the wire lane's protocols: ModelInfer bytes, and HTTP JSON bodies
_WIRE_CODECS: dict[str, Any] = {"grpc": wire_grpc, "json": wire_http}


def format_exception(exc: BaseException) -> str:
    """``Type: message`` and the model's frames, innermost first (as pybind11 prints them)."""
    text = f"{type(exc).__name__}: {exc}"
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_OWN_DIR)
    ]
    if not frames:
        return text
    lines = "".join(f"  {f.filename}({f.lineno}): {f.name}\n" for f in reversed(frames))
    return f"{text}\n\nAt:\n{lines}"


def _none_returned() -> str:
    return (
        "execute() returned None; a model that is not decoupled must return a list with one "
        "InferenceResponse per request, or send one response per request through its response "
        "sender"
    )


async def _on_behalf_of(parents: tuple[int, ...], coroutine: Any) -> Any:
    """Run a coroutine of the model on the background loop with the BLS parents of the
    execute call that started it (a task there does not inherit the caller's context)."""
    RUNTIME.parents.set(parents)
    return await coroutine


class Instance:
    def __init__(self, link: ChildLink) -> None:
        self.link = link
        self.model_class: Any = None
        self.model: Any = None
        self.name = ""
        self.decoupled = False
        self._background: asyncio.AbstractEventLoop | None = None
        self._dtypes: dict[str, Any] = {}
        self._wire_plan: WirePlan | None = None

    def _run(self, result: Any) -> Any:
        """``result``, or what it gives when awaited on the background loop (where every
        coroutine of the model runs: ``initialize``, ``execute`` and ``finalize`` share it).
        A list (what ``execute`` returns) or None is told apart without ``inspect``."""
        if type(result) is list or result is None or not inspect.isawaitable(result):
            return result
        future = asyncio.run_coroutine_threadsafe(
            _on_behalf_of(RUNTIME.parents.get(), result), self._background_loop()
        )
        return future.result()

    def _background_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop (in its own thread) where ``async def execute`` runs, so that tasks
        the model starts go on running after ``execute`` returns, as in Triton."""
        if self._background is None:
            loop = self._background = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, daemon=True).start()
        return self._background

    def _run_in_background(self, coroutine: Any) -> None:
        """A decoupled ``async def execute``: run it without waiting."""
        future = asyncio.run_coroutine_threadsafe(
            _on_behalf_of(RUNTIME.parents.get(), coroutine), self._background_loop()
        )
        future.add_done_callback(self._background_done)

    def _background_done(self, future: Any) -> None:
        exc = future.exception()
        if exc is not None:
            RUNTIME.log(
                2,
                f"Failed to process the request(s) for model '{self.name}', message: "
                f"{format_exception(exc)}",
                "stub.py",
                0,
            )

    # --- init --------------------------------------------------------------------------------
    def _load_class(self, model_file: str) -> Any:
        if self.model_class is None:
            module = self._import(Path(model_file))
            model_class = getattr(module, "TritonPythonModel", None)
            if model_class is None:
                raise ImportError(
                    f"TritonPythonModel class not found in {model_file}; a python model must "
                    "define class TritonPythonModel"
                )
            self.model_class = model_class
        return self.model_class

    def _configure(self, args: dict[str, str]) -> None:
        self.name = args["model_instance_name"]
        RUNTIME.link = self.link
        RUNTIME.instance_name = self.name
        RUNTIME.model_name = args.get("model_name", "")

    def auto_complete(self, payload: dict[str, Any]) -> tuple[str, Any]:
        args: dict[str, str] = payload["args"]
        self._configure(args)
        try:
            model_class = self._load_class(payload["model_file"])
            complete = getattr(model_class, "auto_complete_config", None)
            if complete is None:
                return OK, {"config": None}
            completed = complete(pb_utils.ModelConfig(args["model_config"]))
            if not isinstance(completed, pb_utils.ModelConfig):
                model = args.get("model_name", "")
                return ERROR, (
                    f"auto_complete_config function in model '{model}' must return a valid "
                    "pb.ModelConfig object."
                )
            return OK, {"config": json.dumps(completed.as_dict())}
        except BaseException as exc:
            return ERROR, format_exception(exc)

    def init(self, payload: dict[str, Any]) -> tuple[str, Any]:
        args: dict[str, str] = payload["args"]
        self._configure(args)
        try:
            model_class = self._load_class(payload["model_file"])
            self.decoupled = pb_utils.using_decoupled_model_transaction_policy(
                json.loads(args["model_config"])
            )
            RUNTIME.decoupled = self.decoupled
            self.model = model_class()
            initialize = getattr(self.model, "initialize", None)
            if initialize is not None:
                self._run(initialize(args))
        except BaseException as exc:
            return ERROR, format_exception(exc)
        RUNTIME.executing = True
        return OK, {"config": None}

    @staticmethod
    def _import(path: Path) -> Any:
        """Import the model file as Triton's stub does: the version folder and the model
        folder are appended to ``sys.path`` and the file is imported as ``<version>.<name>``
        (a namespace package), so a model can ``import sibling`` from its version folder,
        ``from . import sibling`` too, and its tests can import it again as ``model``."""
        version_dir, model_dir = path.parent, path.parent.parent
        for folder in (str(version_dir), str(model_dir)):
            if folder not in sys.path:
                sys.path.append(folder)
        if version_dir.name.isdigit():
            return importlib.import_module(f"{version_dir.name}.{path.stem}")
        spec = importlib.util.spec_from_file_location(path.stem, path)  # not a version folder
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import the model file {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        return module

    # --- execute -----------------------------------------------------------------------------
    def prepare(self, message: Any) -> Any:
        """An operation with its batches' requests built (the prefetch thread's part, see
        :mod:`repokit.backends.python.prefetch`); other operations as they are."""
        op, payload = message
        if op != EXECUTE:
            return message
        prepared: list[_Prepared | WireItem] = []
        for batch in payload:
            if isinstance(batch, tuple):  # a WireItem (a batch is a list)
                prepared.append(batch)
                continue
            started = time.monotonic_ns()
            requests, wired = self._build(batch)
            prepared.append(_Prepared(requests, time.monotonic_ns() - started, wired))
        return op, prepared

    def execute(self, batch: RequestBatch | WireItem | _Prepared) -> BatchReply:
        if isinstance(batch, tuple):  # a WireItem (a batch is a list)
            return self._execute_wire(batch)
        if isinstance(batch, _Prepared):
            now = time.monotonic_ns()
            requests, wired, started, built = batch.requests, batch.wired, now - batch.input_ns, now
        else:
            started = time.monotonic_ns()
            requests, wired = self._build(batch)
            built = time.monotonic_ns()
        if wired is None:
            return self._execute_requests(requests, started, built)
        if not requests:  # the instance took none of them
            return OK, [FELL_BACK] * wired.size, NO_TIMING
        reply = self._execute_requests(requests, started, built, codecs=wired.codecs)
        return _with_fallbacks(reply, wired) if wired.fallbacks else reply

    def _build(self, batch: RequestBatch) -> tuple[list[pb_utils.InferenceRequest], _Wired | None]:
        """The batch's requests for ``execute``; with the wire entries' codecs when it has
        wire entries (five fields, a request of the standard path has seven)."""
        for entry in batch:
            if len(entry) == 5:
                return self._build_wired(batch)
        return [self._standard(entry) for entry in cast("list[RequestItem]", batch)], None

    def _standard(self, entry: RequestItem) -> pb_utils.InferenceRequest:
        """A request of the standard path (its inputs packed by the server) for ``execute``."""
        inputs, requested, request_id, correlation_id, flags, parameters, key = entry
        tensor, unpack, dtypes = pb_utils.Tensor._wrap, ipc.unpack_array, self._dtypes
        return pb_utils.InferenceRequest._received(
            [tensor(name, unpack(a, dtypes), special is not None) for name, a, special in inputs],
            set(requested),
            request_id,
            correlation_id,
            flags,
            parameters,
            key,
        )

    def _build_wired(self, batch: RequestBatch) -> tuple[list[pb_utils.InferenceRequest], _Wired]:
        """A batch with wire entries: each decoded and checked as :meth:`_execute_wire` does;
        one the instance does not take is left out (the server's standard path answers it)."""
        tensor, received = pb_utils.Tensor._wrap, pb_utils.InferenceRequest._received
        requests: list[pb_utils.InferenceRequest] = []
        codecs: list[_WireCodec | None] = []
        fallbacks: list[int] = []
        for index, entry in enumerate(batch):
            if len(entry) != 5:
                requests.append(self._standard(entry))
                codecs.append(None)
                continue
            protocol, raw, given, limit, key = entry
            taken = self._decode_wire(protocol, raw, given, limit)
            if taken is None:
                fallbacks.append(index)
                continue
            codec, plan, (arrays, wanted, request_id, _) = taken
            tensors = [tensor(name, array, False) for name, array in arrays]
            requests.append(received(tensors, wanted, request_id, 0, 0, "{}", key))
            codecs.append((codec, plan, wanted, request_id))
        return requests, _Wired(codecs, fallbacks, len(batch))

    def _decode_wire(
        self, protocol: str, raw: bytes, given: WirePlan | None, limit: int
    ) -> tuple[Any, WirePlan, Any] | None:
        """(the codec module, the plan, the decoded request) of a request in its wire form
        (``given``: the plan when it comes along), or None when the instance does not take it
        (the server's standard path answers it then)."""
        if given is not None:
            self._wire_plan = given
        plan = self._wire_plan
        codec = _WIRE_CODECS.get(protocol)
        if plan is None or codec is None:
            return None
        try:
            decoded = codec.decode_request(raw, plan, limit)
        except Exception:  # bytes its decoder cannot take: the standard path answers them
            return None
        return None if decoded is None else (codec, plan, decoded)

    def _execute_wire(self, item: WireItem) -> BatchReply:
        """One request in its wire form (:mod:`repokit.backends.python.wire_grpc`). The reply is
        ``(FALLBACK, None, NO_TIMING)`` when the server must take the request through its
        standard path (nothing ran), else ``(WIRE, (kind, payload, batch size), timing)``: kind
        ``BODY`` with the encoded response, or the status and payload of the usual reply of a
        batch of one (``OK`` with the packed response, ``ERROR``, ``RESCHEDULED``)."""
        started = time.monotonic_ns()
        protocol, raw, key, given, limit = item
        taken = self._decode_wire(protocol, raw, given, limit)
        if taken is None:
            return FALLBACK, None, NO_TIMING
        codec, plan, (arrays, requested, request_id, batch_size) = taken
        tensor = pb_utils.Tensor._wrap
        request = pb_utils.InferenceRequest._received(
            [tensor(name, array, False) for name, array in arrays],
            requested, request_id, 0, 0, "{}", key,
        )  # fmt: skip
        built = time.monotonic_ns()
        status, results, timing = self._execute_requests([request], started, built, wire=True)
        if status != WIRE:
            return WIRE, (status, results, batch_size), timing
        input_ns, infer_ns, _, _ = timing
        body = codec.encode_response(plan, results[0], requested, request_id)
        reply = (
            (BODY, body, batch_size)
            if body is not None
            else (OK, [pack_model_response(results[0], requested)], batch_size)
        )
        return WIRE, reply, (input_ns, infer_ns, time.monotonic_ns() - built - infer_ns, started)

    def _execute_requests(
        self,
        requests: list[pb_utils.InferenceRequest],
        started: int,
        built: int,
        wire: bool = False,
        codecs: list[_WireCodec | None] | None = None,
    ) -> BatchReply:
        """Run ``execute`` on built requests and check its responses as Triton does; with
        ``wire`` a successful single response comes back unconverted (status ``WIRE``); with
        ``codecs`` (a batch with wire entries) the wire entries' responses come back encoded
        where their codec can encode them."""
        runtime = RUNTIME
        parents = runtime.parents.set(
            (requests[0]._key,) if len(requests) == 1 else tuple([r._key for r in requests])
        )
        rescheduled: tuple[int, ...] = ()
        responses: Any = None
        try:
            if self.decoupled:
                return self._execute_decoupled(requests, started, built)
            try:
                responses = self.model.execute(requests)
                if type(responses) is not list:  # a coroutine is waited for (see _run)
                    responses = self._run(responses)
                if runtime.reschedule_requested:
                    rescheduled = self._rescheduled(requests)
                problem = (
                    None  # the common case: one InferenceResponse per request
                    if type(responses) is list
                    and len(responses) == len(requests)
                    and not rescheduled
                    and _all_responses(responses)
                    else self._check_returned(responses, requests, rescheduled)
                )
            except BaseException as exc:
                problem = format_exception(exc)
        finally:
            runtime.parents.reset(parents)
        executed = time.monotonic_ns()
        if _some_sender_used(requests):
            return self._answers_with_senders(
                requests,
                responses,
                problem,
                rescheduled,
                (built - started, executed - built, 0, started),
            )
        if problem is not None:
            message = (
                f"Failed to process the request(s) for model '{self.name}', message: {problem}"
            )
            return ERROR, message, (built - started, executed - built, 0, started)
        if rescheduled:
            results: list[Any] = [
                None
                if response is None
                else pack_model_response(response, request.requested_output_names())
                for response, request in zip(
                    responses or [None] * len(requests), requests, strict=True
                )
            ]
            finished = time.monotonic_ns()
            timing = (built - started, executed - built, finished - executed, started)
            return RESCHEDULED, (results, rescheduled), timing
        if wire:
            return WIRE, responses, (built - started, executed - built, 0, started)
        if codecs is not None:
            results = [
                _pack_response(response, request.requested_output_names())
                if codec is None
                else _encode_wire(codec, response)
                for response, request, codec in zip(responses, requests, codecs, strict=True)
            ]
        else:
            results = [
                _pack_response(response, request.requested_output_names())
                for response, request in zip(responses, requests, strict=True)
            ]
        finished = time.monotonic_ns()
        return OK, results, (built - started, executed - built, finished - executed, started)

    def _rescheduled(self, requests: list[pb_utils.InferenceRequest]) -> tuple[int, ...]:
        """Indexes of the requests the model released with RESCHEDULE in this execute call.
        A request whose final response went out already is complete: it is not rescheduled
        (Triton 2.51 crashes on that)."""
        RUNTIME.reschedule_requested = False
        found = []
        for index, request in enumerate(requests):
            if request.release_flags() != pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
                continue
            sender = request.response_sender_if_used()
            if sender is not None and sender.closed:
                RUNTIME.log(
                    2,
                    f"model '{self.name}' released a request with "
                    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE after sending its final response: "
                    "the request is complete and is not rescheduled",
                    "stub.py",
                    0,
                )
                continue
            found.append(index)
        return tuple(found)

    def _answers_with_senders(
        self,
        requests: list[pb_utils.InferenceRequest],
        responses: Any,
        problem: str | None,
        rescheduled: tuple[int, ...],
        timing: Timing,
    ) -> BatchReply:
        """The answers of a non-decoupled batch where requests used their response sender
        (Triton's rules): a response sent while ``execute`` ran is the request's answer (a
        returned response or a later failure no longer reaches the client); a request answered
        by neither is answered later through the sender (``SENT_LATER``); one that
        ``execute`` answered or failed for has its sender closed."""
        returned = responses if problem is None and isinstance(responses, (list, tuple)) else None
        message = f"Failed to process the request(s) for model '{self.name}', message: {problem}"
        items: list[Any] = []
        answered = False  # some request has its answer in spite of a problem
        for index, request in enumerate(requests):
            response = returned[index] if returned is not None else None
            requested = request.requested_output_names()
            sender = request.response_sender_if_used()
            settled = index not in rescheduled and (problem is not None or response is not None)
            sent = sender.detach(settled) if sender is not None else None
            if sent is not None:
                items.append(pack_model_response(sent, requested))
                answered = True
            elif index in rescheduled:
                items.append(None)
            elif problem is not None:
                items.append((ERROR, "INTERNAL", message))
            elif response is not None:
                items.append(pack_model_response(response, requested))
            else:
                items.append(SENT_LATER)
                answered = True
        if problem is not None and not answered:
            return ERROR, message, timing
        if rescheduled:
            return RESCHEDULED, (items, rescheduled), timing
        return OK, items, timing

    @staticmethod
    def _check_returned(
        responses: Any, requests: list[pb_utils.InferenceRequest], rescheduled: tuple[int, ...]
    ) -> str | None:
        """Triton's checks of a non-decoupled ``execute``'s return: None, or a list with one
        InferenceResponse per request, where None stands for a rescheduled request or one
        answered through its response sender."""
        count = len(requests)
        if (
            type(responses) is list
            and len(responses) == count
            and not rescheduled
            and all([type(response) is pb_utils.InferenceResponse for response in responses])
        ):
            return None  # the common case, checked at once
        if responses is None:
            for index, request in enumerate(requests):
                if index not in rescheduled and request.response_sender_if_used() is None:
                    return _none_returned()
            return None
        if not isinstance(responses, (list, tuple)) or len(responses) != count:
            return Instance._check(responses, count)
        for index, response in enumerate(responses):
            if index in rescheduled:
                if response is not None:
                    return Instance._check_rescheduled([response], 1, (0,))
            elif response is None and requests[index].response_sender_if_used() is not None:
                continue
            elif not isinstance(response, pb_utils.InferenceResponse):
                return Instance._check([response], 1)
        return None

    def _execute_decoupled(
        self, requests: list[pb_utils.InferenceRequest], started: int, built: int
    ) -> BatchReply:
        problem = None
        try:
            returned = self.model.execute(requests)
            if inspect.iscoroutine(returned):
                self._run_in_background(returned)
                returned = None
            if returned is not None:
                problem = (
                    f"Python model '{self.name}' is using the decoupled mode and the execute "
                    "function must return None."
                )
        except BaseException as exc:
            problem = format_exception(exc)
        executed = time.monotonic_ns()
        rescheduled = self._rescheduled(requests) if RUNTIME.reschedule_requested else ()
        if problem is not None:
            message = (
                f"Failed to process the request(s) for model '{self.name}', message: {problem}"
            )
            RUNTIME.log(2, message, "stub.py", 0)
            for request in requests:
                sender = request.get_response_sender()
                if not sender.closed:
                    error = pb_utils.InferenceResponse(error=pb_utils.TritonError(message))
                    with contextlib.suppress(pb_utils.TritonModelException):  # closed meanwhile
                        sender.send(error, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if rescheduled and problem is None:
            timing = (built - started, executed - built, 0, started)
            return RESCHEDULED, ([None] * len(requests), rescheduled), timing
        return OK, [None] * len(requests), (built - started, executed - built, 0, started)

    @staticmethod
    def _check(responses: Any, count: int) -> str | None:
        if responses is None:
            return _none_returned()
        if not isinstance(responses, (list, tuple)):
            return f"Expected a list in the execute return, found type '{type(responses)}'."
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
    def _check_rescheduled(responses: Any, count: int, rescheduled: tuple[int, ...]) -> str | None:
        """As :meth:`_check`, where the rescheduled requests must have None (Triton's text)."""
        if responses is None or not isinstance(responses, (list, tuple)):
            return Instance._check(responses, count)
        if len(responses) != count:
            return Instance._check(responses, count)
        for index, response in enumerate(responses):
            if index in rescheduled:
                if response is not None:
                    return (
                        "Expected a None object in the execute function return list for "
                        f"reschduled request, found type '{type(response)}'."
                    )
            elif not isinstance(response, pb_utils.InferenceResponse):
                return Instance._check([response], 1)
        return None

    def finalize(self) -> None:
        RUNTIME.finalizing = True
        finalize = getattr(self.model, "finalize", None)
        if finalize is not None:
            try:
                self._run(finalize())
            except BaseException as exc:
                RUNTIME.log(
                    2,
                    f"Failed to finalize model instance '{self.name}': {format_exception(exc)}",
                    "stub.py",
                    0,
                )


def _all_responses(responses: list[Any]) -> bool:
    """Whether every item is an ``InferenceResponse`` (as :meth:`Instance._check_returned`
    checks first; a loop, which costs less than ``all`` over a comprehension)."""
    response_type = pb_utils.InferenceResponse
    for response in responses:  # noqa: SIM110 - a generator for all() costs more
        if type(response) is not response_type:
            return False
    return True


def _some_sender_used(requests: list[pb_utils.InferenceRequest]) -> bool:
    """Whether a request's response sender was asked for (by ``execute``)."""
    for request in requests:  # noqa: SIM110 - a generator for any() costs more
        if request._sender is not None:
            return True
    return False


def _pack_response(response: Any, requested: set[str]) -> PackedResult | None:
    """:func:`~repokit.backends.python.messages.pack_model_response` of the common case without
    method calls: an ``InferenceResponse`` without an error whose outputs are ``Tensor``
    objects (not BF16); anything else through that function."""
    if type(response) is not pb_utils.InferenceResponse or response._error is not None:
        return pack_model_response(response, requested)
    pack_array = ipc.pack_array
    outputs = []
    for tensor in response._outputs:
        if type(tensor) is not pb_utils.Tensor or tensor._bf16:
            return pack_model_response(response, requested)
        name = tensor._name
        if name in requested:
            outputs.append((name, pack_array(tensor._array)))
    return (OK, outputs, response._parameters)


def _encode_wire(codec: _WireCodec, response: Any) -> PackedResult | None:
    """A wire entry's response as the client gets it (``(BODY, bytes)``), or packed when its
    codec cannot encode it (the server finishes it then)."""
    module, plan, requested, request_id = codec
    body = module.encode_response(plan, response, requested, request_id)
    if body is None:
        return pack_model_response(response, requested)
    return (BODY, body)


def _with_fallbacks(reply: BatchReply, wired: _Wired) -> BatchReply:
    """The reply of a batch some of whose wire entries the instance did not take, with one
    result per entry of the batch again (:data:`FELL_BACK` for those): the results of the
    requests that ran at their places; a batch that failed as a whole fails each of them."""
    status, body, timing = reply
    fell_back = set(wired.fallbacks)
    taken = [index for index in range(wired.size) if index not in fell_back]
    if status == ERROR:
        results: list[Any] = [(ERROR, "INTERNAL", body)] * len(taken)
        status = OK
    elif status == RESCHEDULED:
        results, indexes = body
    else:
        results = body
    expanded: list[Any] = [FELL_BACK] * wired.size
    for index, result in zip(taken, results, strict=True):
        expanded[index] = result
    if status == RESCHEDULED:
        return RESCHEDULED, (expanded, tuple(taken[i] for i in indexes)), timing
    return status, expanded, timing


def _send_reply(link: ChildLink, instance: Instance, op: str, reply: Any) -> None:
    """Send ``reply``; a result that cannot be pickled fails only its own batch."""
    try:
        link.send(reply)
        return
    except BaseException as exc:  # e.g. an output object array holding unpicklable objects
        problem = exc
    if op == EXECUTE and reply[0] == OK:
        batches = []
        for batch_reply in reply[1]:
            try:
                ipc.encode(batch_reply)
            except BaseException as exc:
                batch_reply = (ERROR, _unsendable(instance, exc), batch_reply[2])
            batches.append(batch_reply)
        link.send((OK, batches))
    else:
        link.send((ERROR, _unsendable(instance, problem)))


def _unsendable(instance: Instance, exc: BaseException) -> str:
    return (
        f"Failed to process the request(s) for model '{instance.name}', message: "
        f"{format_exception(exc)}"
    )


def serve(sock: socket.socket, fd_socket: FdSocket | None = None) -> None:
    link = ChildLink(sock, fd_socket)
    instance = Instance(link)
    prefetcher = Prefetcher(link, instance.prepare)
    armed = False  # the prefetch thread is fetching the next operation
    while True:
        try:
            if armed:
                (op, payload), queued = prefetcher.take()
            else:
                message = link.ready_op()
                queued = message is not None  # it came while the previous one ran
                op, payload = message if queued else link.next_op()
        except ipc.ChannelClosed:
            return
        armed = False
        if op == EXECUTE:
            # operations come back to back: fetch and prepare the next one meanwhile; not for
            # wire items alone (there is nothing to prepare, and the handoff to the helper
            # thread would cost more than the read it takes over)
            if queued and not all([isinstance(item, tuple) for item in payload]):
                armed = True
                prefetcher.arm()
            reply: tuple[str, Any] = (OK, [instance.execute(batch) for batch in payload])
        elif op == INIT:
            reply = instance.init(payload)
            if reply[0] == OK:  # keep full collections off the model's startup objects
                gc.collect()
                gc.freeze()
        elif op == AUTO_COMPLETE:
            reply = instance.auto_complete(payload)
        elif op == FINALIZE:
            instance.finalize()
            link.send((OK, None))
            return
        else:
            reply = (ERROR, f"unknown operation {op!r}")
        _send_reply(link, instance, op, reply)


def main(argv: list[str]) -> int:
    keep_freed_memory()  # tensor buffers reused, not faulted in anew (repokit.malloc_settings)
    sys.modules["triton_python_backend_utils"] = pb_utils
    sock = socket.socket(fileno=int(argv[1]))
    fd_socket = FdSocket(socket.socket(fileno=int(argv[2]))) if len(argv) > 2 else None
    # Triton's stub embeds Python with no arguments: models see sys.argv == [""] (Triton's qa
    # models call unittest.main("model"), which would take a leftover argument for a test)
    sys.argv[:] = [""]
    try:
        serve(sock, fd_socket)
    finally:
        sock.close()
        if fd_socket is not None:
            fd_socket.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
