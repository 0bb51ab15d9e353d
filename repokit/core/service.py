"""InferenceService: one method per protocol operation; the only thing frontends call.

All methods raise ``RepokitError`` with Triton's code and message on failure; frontends map
the code to their status in one table. Build it with ``repokit.core.compose.build_service``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncGenerator, Awaitable
from typing import Any, TypeVar

from repokit.backends.base import WireRequest
from repokit.backends.server_api import RequestControl
from repokit.core.cpu_metrics import CpuMetrics, stop_task
from repokit.core.decoupled import stream_responses
from repokit.core.dispatch import record_failed, record_ran, submit, submit_wire
from repokit.core.infer_codec import InferCodec
from repokit.core.loaded_model import LoadedVersion
from repokit.core.log_settings import LogSettingsStore
from repokit.core.metrics import MetricSource, render_metrics
from repokit.core.model_bridge import ServiceBridge
from repokit.core.model_manager import ModelManager
from repokit.core.outputs import finish_outputs
from repokit.core.plain_path import prepare_plain
from repokit.core.quick_wire import QuickDone, QuickWire
from repokit.core.request_checks import PreparedRequest, prepare
from repokit.core.server_log import VERBOSE, VERBOSE_DETAIL
from repokit.core.settings import ServerSettings
from repokit.core.shared_memory import SystemSharedMemory
from repokit.core.tracing.manager import TraceManager
from repokit.core.tracing.trace import Trace
from repokit.core.wire_lane import WIRE_LANE_MAX_BYTES
from repokit.errors import RepokitError, invalid_arg, unavailable, unsupported
from repokit.protocol import datatypes
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.protocol.types import InferRequest, InferResponse
from repokit.scheduler.base import ScheduledResult

log = logging.getLogger(__name__)
_EXIT_TIMEOUT = "Exit timeout expired. Exiting immediately."
_DRAIN_POLL_S = 0.02  # shutdown: how often the in-flight count is looked at
_COUNTDOWN_S = 1.0  # shutdown: Triton's countdown step while the models unload

T = TypeVar("T")
RawT = TypeVar("RawT")
DecodedT = TypeVar("DecodedT")
OutT = TypeVar("OutT")

# Triton's extension list in Triton's order, keeping only what repokit implements:
# not cuda_shared_memory (no GPUs).
EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)


def _request_tag(request: InferRequest | None) -> str:
    if request is None:  # a request an instance decoded
        return "[request id: <id_unknown>]"
    return f"[request id: {request.id or '<id_unknown>'}]"


# what Triton 2.51's dynamic batch and sequence batch schedulers answer a request that comes
# once the server is stopping (dynamic_batch_scheduler.cc, sequence_batch_scheduler.cc)
SCHEDULER_STOPPED = (
    "Server is stopping, scheduler for model has stopped accepting new inference requests"
)


def _scheduler_stopped(loaded: LoadedVersion, request: InferRequest) -> RepokitError:
    """A request refused while the server stops, as Triton refuses it: the model's scheduler
    (an ensemble's first step's, which the ensemble names) says so after the request's tag."""
    message = f"{_request_tag(request)} {SCHEDULER_STOPPED}"
    if loaded.is_ensemble:
        message = f"in ensemble '{loaded.name}', {message}"
    return unavailable(message)


def _tensor_metadata(items: Any, batching: bool) -> list[dict[str, Any]]:
    return [
        {
            "name": item.name,
            "datatype": datatypes.protocol_name(item.data_type),
            "shape": ([-1] if batching else []) + list(item.dims),
        }
        for item in items
    ]


class InferenceService:
    def __init__(self, settings: ServerSettings, manager: ModelManager) -> None:
        self.settings = settings
        self.manager = manager
        self.shared_memory = SystemSharedMemory(settings.allow_client_shm)
        self._logs = LogSettingsStore(settings.log)
        self.tracing = TraceManager(settings.trace)
        self._live = False
        self._exiting = False
        self._inflight = 0
        self._inflight_control = 0  # repository loads / unloads running (Triton counts them)
        self._cpu: CpuMetrics | None = None
        self._cpu_task: asyncio.Task[None] | None = None
        # what backends may call (BLS, model control, custom metrics, model logs)
        self.bridge = ServiceBridge(self)
        manager.server = self.bridge

    # --- lifecycle (build_service's start/stop) ------------------------------------------
    async def start(self) -> None:
        self.tracing.start()
        if self.settings.metrics.allow_cpu_metrics:  # as Triton: collected every interval
            self._cpu = CpuMetrics()
            interval = self.settings.metrics.interval_ms / 1000
            self._cpu_task = asyncio.create_task(self._cpu.run(interval), name="cpu-metrics")
        await self.manager.start()
        self._live = True

    def refuse_new_requests(self) -> None:
        """From now on new requests are refused in the scheduler's words (UNAVAILABLE "Server
        is stopping, ..."; those continuing a started sequence still run) and the health
        endpoints say "Server exiting"; :meth:`stop` does this first too."""
        self._exiting = True

    async def stop(self, deadline: float | None = None) -> bool:
        """Refuse new requests (:meth:`refuse_new_requests`), wait for in-flight ones, open
        sequences and open streams until ``deadline`` (time.monotonic(); default:
        exit_timeout_secs from now), unload every model (finalize runs), logging each step as
        tritonserver does. Requests still running at the deadline fail when their instances
        are stopped, and models still live at the deadline are stopped all the same: then
        False (tritonserver's "Exit timeout expired"; it exits 1)."""
        self.refuse_new_requests()
        if deadline is None:
            deadline = time.monotonic() + max(0.0, self.settings.exit_timeout_secs)
        log.info("Waiting for in-flight requests to complete.")
        drained, countdown = await self._drain(deadline)
        if not drained:
            log.error("failed to stop server: Internal - %s", _EXIT_TIMEOUT)
        log.info("All models are stopped, unloading models")
        unloaded = await self._unload_models(deadline, countdown)
        if drained and not unloaded:
            log.error("failed to stop server: Internal - %s", _EXIT_TIMEOUT)
        await stop_task(self._cpu_task)
        self._cpu_task = None
        self.shared_memory.close()
        await asyncio.to_thread(self.tracing.stop)  # the exporter may flush over the network
        self._live = False
        return drained and unloaded

    async def _drain(self, deadline: float) -> tuple[bool, int]:
        """Wait until no request is in flight and no started sequence is open (True) or the
        deadline passes (False), saying once a second how many model versions still have
        in-flight inferences (Triton's count: a sequence model's open sequences, which go on
        until they end or idle out); with the countdown's last number (Triton's
        exit_timeout_iters, which the unload goes on with)."""
        said = -1
        while True:
            remaining = deadline - time.monotonic()
            counts = [(v, v.shutdown_inflight()) for v in self.manager.all_ready()]
            busy = [(v, n) for v, n in counts if n > 0]
            done = self._inflight == 0 and not busy
            if math.ceil(remaining) != said or done:
                said = math.ceil(remaining)
                log.info(
                    "Timeout %d: Found %d model versions that have in-flight inferences",
                    max(0, said),
                    len(busy),
                )
                for version, count in busy:  # as Triton 2.51's server.cc (L0_lifecycle greps)
                    log.info(
                        "Model '%s' (version %d) has %d in-flight inferences",
                        version.name,
                        version.version,
                        count,
                    )
            if done:
                return True, max(0, said)
            if remaining <= 0:
                return False, 0
            await asyncio.sleep(min(_DRAIN_POLL_S, remaining))

    async def _unload_models(self, deadline: float, countdown: int) -> bool:
        """Unload every model, going on with the countdown as tritonserver 2.51's
        InferenceServer::Stop (server.cc) does once it asked its models to unload: "Timeout N:
        Found M live models and K in-flight non-inference requests" right away, then once a
        second until no model is live (True) or the countdown reaches 0 (False); at verbose
        level 1 each live version's state too. Triton only polls; here the last line comes
        as soon as the unload ends. Models are stopped all the same (bounded by ``deadline``)."""
        unload = self.manager.unload_all(deadline)
        try:
            while True:
                live = self.manager.live_model_states()
                models = len(live) + self.manager.background_models_size()
                log.info(
                    "Timeout %d: Found %d live models and %d in-flight non-inference requests",
                    countdown,
                    models,
                    self._inflight_control,
                )
                if log.isEnabledFor(VERBOSE):
                    for name, versions in live.items():
                        for number, state in versions.items():
                            log.log(VERBOSE, "%s v%d: %s", name, number, state)
                unloaded = models == 0 and self._inflight_control == 0
                if unloaded or countdown <= 0:
                    break
                countdown -= 1
                if unload.done():  # a repository request still running, say
                    await asyncio.sleep(_COUNTDOWN_S)
                else:
                    await asyncio.wait({unload}, timeout=_COUNTDOWN_S)
        except BaseException:
            unload.cancel()
            raise
        await unload
        return unloaded

    @property
    def inflight_requests(self) -> int:
        return self._inflight

    # --- health & metadata -------------------------------------------------------------
    def server_live(self) -> bool:
        if self._exiting:
            raise unavailable("Server exiting")
        return self._live

    def server_ready(self) -> bool:
        if self._exiting:
            raise unavailable("Server exiting")
        return self._live and self.manager.server_ready(self.settings.strict_readiness)

    def server_metadata(self) -> dict[str, Any]:
        """{"name": "triton", "version": ..., "extensions": [...]}"""
        return {
            "name": self.settings.server_id,
            "version": self.settings.server_version,
            "extensions": list(EXTENSIONS),
        }

    def model_ready(self, name: str, version: str = "") -> bool:
        """False for unknown, unavailable or unhealthy versions (Triton 2.51 answers 400
        "Model version not ready" for all of these on HTTP, ready=false on gRPC)."""
        try:
            loaded = self.manager.get(name, version)
        except RepokitError:
            return False
        return loaded.healthy()

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        """Triton's model metadata JSON shape (batch dim prepended, BYTES for strings)."""
        loaded = self.manager.get(name, version)
        config = loaded.config
        if version:
            versions = [str(loaded.version)]
        else:
            versions = [str(v.version) for v in self.manager.ready_versions(name)]
        batching = config.max_batch_size > 0
        return {
            "name": name,
            "versions": versions,
            "platform": config.platform or config.backend,
            "inputs": _tensor_metadata(config.input, batching),
            "outputs": _tensor_metadata(config.output, batching),
        }

    def model_config(self, name: str, version: str = "") -> mc.ModelConfig:
        """The normalised config of the selected version."""
        return self.manager.get(name, version).config

    def model_config_json(self, name: str, version: str = "") -> dict[str, Any]:
        """The config in Triton's /config JSON form (int64 fields as numbers, defaults printed)."""
        return self.manager.get(name, version).config_json

    def output_labels(self, name: str, version: str, output: str) -> list[str]:
        """The label lines of ``output``'s ``label_filename`` (empty without one), read once at
        load, for frontends that build classifications themselves (the v1 API); raises
        NOT_FOUND / UNAVAILABLE as every lookup."""
        return list(self.manager.get(name, version).labels.get(output, ()))

    def is_decoupled(self, name: str, version: str = "") -> bool:
        return self._version(name, version).decoupled

    # --- inference ---------------------------------------------------------------------
    async def infer(self, request: InferRequest, trace: Trace | None = None) -> InferResponse:
        """Run one request; ``trace`` (from ``self.tracing.sample``) records its timestamps."""
        if trace is not None:
            return await self._infer_traced(request, trace)
        loaded, prepared = self.admit(request)
        return await self.run_admitted(loaded, request, prepared)

    async def _infer_traced(self, request: InferRequest, trace: Trace) -> InferResponse:
        """:meth:`infer` recording REQUEST_START (when the request reached the core),
        INFER_RESPONSE_COMPLETE and REQUEST_END; the dispatch records the rest."""
        started = time.monotonic_ns()
        loaded, prepared = self.admit(request)  # a refused request has no core timestamps
        trace.start_request(loaded.name, loaded.version, request.id, started)
        prepared.backend_request.trace = trace
        try:
            response = await self.run_admitted(loaded, request, prepared)
            trace.stamp("INFER_RESPONSE_COMPLETE")
            return response
        finally:
            trace.stamp("REQUEST_END")

    def admit(
        self, request: InferRequest, loaded: LoadedVersion | None = None
    ) -> tuple[LoadedVersion, PreparedRequest]:
        """The version a request runs on (``loaded``: the one the caller just looked up for
        it) and the request checked against it (raises; at --log-verbose 1 the request and
        why it failed are logged)."""
        try:
            loaded, prepared = self._admit(request, loaded)
        except RepokitError as exc:
            if log.isEnabledFor(VERBOSE):
                log.debug("%s Infer failed: %s", _request_tag(request), exc.message)
            raise
        if log.isEnabledFor(VERBOSE):
            log.debug(
                "%s prepared: model: %s, requested version: %s, actual version: %d, "
                "batch size: %d, inputs: %s, requested outputs: %s",
                _request_tag(request),
                loaded.name,
                request.model_version or "-1",
                loaded.version,
                prepared.batch_size,
                ", ".join(f"{i.name} {i.datatype}{list(i.shape)}" for i in request.inputs),
                ", ".join(o.name for o in request.outputs) or "(all)",
            )
        return loaded, prepared

    def _admit(
        self, request: InferRequest, loaded: LoadedVersion | None
    ) -> tuple[LoadedVersion, PreparedRequest]:
        if self._exiting and (request.sequence_start or request.sequence_id in (0, "")):
            # shutting down: only requests that continue a started sequence still run (Triton
            # admits them "to provide graceful completion of inference sequence"); the others
            # are refused by their model's scheduler, in its words
            if loaded is None:
                loaded = self._version(request.model_name, request.model_version)
            raise _scheduler_stopped(loaded, request)
        if loaded is None:
            loaded = self.manager.get(request.model_name, request.model_version)
        prepared = prepare_plain(loaded.io, request)
        if prepared is not None:
            return loaded, prepared
        for output in request.outputs:
            if output.shm is not None and output.classification > 0:
                raise invalid_arg(
                    "Output can't set both 'shared_memory_region' and 'classification'"
                )
        return loaded, prepare(loaded.io, request, self.shared_memory.read)

    def run_admitted(
        self, loaded: LoadedVersion, request: InferRequest, prepared: PreparedRequest
    ) -> Awaitable[InferResponse]:
        """Run an admitted request; a caller that goes away cancels it (the model sees
        ``is_cancelled()``). The shared-memory regions it uses cannot be unregistered until it
        is answered."""
        if prepared.shm_regions:
            return self._run_holding(loaded, request, prepared)
        return self._run_admitted(loaded, request, prepared)

    async def _run_holding(
        self, loaded: LoadedVersion, request: InferRequest, prepared: PreparedRequest
    ) -> InferResponse:
        held = self.shared_memory.hold(prepared.shm_regions)
        try:
            return await self._run_admitted(loaded, request, prepared)
        finally:
            self.shared_memory.release(held)

    async def _run_admitted(
        self, loaded: LoadedVersion, request: InferRequest, prepared: PreparedRequest
    ) -> InferResponse:
        backend_request = prepared.backend_request
        control = backend_request.control = RequestControl()
        batch = prepared.batch_size
        # self._in_flight written out (a coroutine less per request)
        self._inflight += 1
        try:
            scheduled, elapsed = await submit(loaded, backend_request, batch)
        except BaseException as exc:
            self._failed_in_flight(exc, request, control)
            raise
        finally:
            self._inflight -= 1
        if not log.isEnabledFor(VERBOSE):  # nor VERBOSE_DETAIL: nothing to log
            return self._finish(loaded, request, batch, scheduled, elapsed)
        try:
            response = self._respond(loaded, request, batch, scheduled, elapsed)
        except RepokitError as exc:
            log.debug("%s Infer failed: %s", _request_tag(request), exc.message)
            raise
        log.debug(
            "%s completed: model %s version %d, %.3f ms",
            _request_tag(request),
            loaded.name,
            loaded.version,
            elapsed / 1e6,
        )
        return response

    async def _in_flight(
        self, run: Awaitable[T], request: InferRequest | None, control: RequestControl | None
    ) -> T:
        """``run`` (a dispatch call) counted as a request in flight on the server; a caller
        that goes away cancels ``control``; failures are logged at --log-verbose 1."""
        self._inflight += 1
        try:
            return await run
        except BaseException as exc:
            self._failed_in_flight(exc, request, control)
            raise
        finally:
            self._inflight -= 1

    @staticmethod
    def _failed_in_flight(
        exc: BaseException, request: InferRequest | None, control: RequestControl | None
    ) -> None:
        """A request in flight ended with ``exc``: a caller that went away cancels
        ``control``; failures are logged at --log-verbose 1."""
        if isinstance(exc, asyncio.CancelledError):
            if control is not None:
                control.cancel()
            if log.isEnabledFor(VERBOSE):
                log.debug("%s cancelled: the client went away", _request_tag(request))
        elif isinstance(exc, RepokitError) and log.isEnabledFor(VERBOSE):
            log.debug("%s Infer failed: %s", _request_tag(request), exc.message)

    async def infer_encoded(
        self,
        codec: InferCodec[RawT, DecodedT, OutT],
        model: str,
        version: str,
        raw: RawT,
        trace: Trace | None = None,
    ) -> OutT:
        """Run a unary infer request given as it arrived (``raw``, in ``codec``'s protocol) and
        encode its response; errors raise as for :meth:`infer` (a decoupled model:
        UNSUPPORTED with the codec's message). A small request for a model with a wire lane
        (:mod:`repokit.core.wire_lane`) goes to the instance as its bytes; anything else, and
        any request the instance does not take, is decoded here once and runs as
        :meth:`infer`. A traced request (``trace``) takes the standard path, with the
        codec's timestamps around decoding and encoding."""
        loaded = self._version(model, version)
        if loaded.decoupled:
            raise unsupported(codec.decoupled_message)
        if trace is not None:
            return await self._infer_encoded_traced(codec, model, version, raw, trace)
        lane = loaded.wire_lane
        if lane is not None and not self._exiting:
            data = codec.lane_bytes(raw)
            if data is not None and len(data) <= WIRE_LANE_MAX_BYTES:
                wire = WireRequest(codec.lane, data, lane.plan, codec.lane_limit)
                ran, elapsed = await self._in_flight(submit_wire(loaded, lane, wire), None, None)
                if ran is not None:
                    return self.wire_answer(codec, loaded, model, version, raw, ran, elapsed)
        return await self.infer_decoded(codec, loaded, model, version, raw)

    async def infer_decoded(
        self,
        codec: InferCodec[RawT, DecodedT, OutT],
        loaded: LoadedVersion,
        model: str,
        version: str,
        raw: RawT,
    ) -> OutT:
        """The standard path of :meth:`infer_encoded`: ``raw`` decoded here and run as
        :meth:`infer` runs it, on the version looked up (``loaded``)."""
        decoded = codec.decode(raw, model, version)
        request = codec.request(decoded)
        admitted, prepared = self.admit(request, loaded)
        return codec.encode(decoded, await self.run_admitted(admitted, request, prepared))

    def quick_version(self, model: str, version: str) -> LoadedVersion | None:
        """The version a request to ``model`` runs on when callbacks can drive it
        (:meth:`start_quick_wire`); None when it takes :meth:`infer_encoded` (an unknown or
        decoupled model, one without a wire lane that callbacks drive, a server exiting)."""
        if self._exiting:
            return None
        try:
            loaded = self.manager.get(model, version)
        except RepokitError:
            return None
        lane = loaded.wire_lane
        if lane is None or lane.quick is None or loaded.decoupled:
            return None
        return loaded

    def start_quick_wire(
        self,
        codec: InferCodec[RawT, Any, OutT],
        loaded: LoadedVersion,
        names: tuple[str, str],
        raw: RawT,
        done: QuickDone[OutT],
    ) -> QuickWire[RawT, OutT] | None:
        """:meth:`infer_encoded` of an untraced request to the model and version ``names``
        (``loaded``: their :meth:`quick_version`), driven by callbacks
        (:mod:`repokit.core.quick_wire`): ``done`` gets the encoded response, or the error
        ``infer_encoded`` would raise. None when the request does not go to an instance as its
        bytes at once; the caller then runs ``infer_encoded`` (nothing was counted)."""
        lane = loaded.wire_lane
        assert lane is not None and lane.quick is not None  # (quick_version)
        data = codec.lane_bytes(raw)
        if data is None or len(data) > WIRE_LANE_MAX_BYTES:
            return None
        started = time.perf_counter_ns()
        scheduler = lane.quick
        try:
            ticket = scheduler.send_wire(WireRequest(codec.lane, data, lane.plan, codec.lane_limit))
        except Exception:  # a backend bug: infer_encoded meets it again and answers it
            return None
        if ticket is None:
            return None
        self._inflight += 1
        loaded.begin()
        return QuickWire(self, codec, loaded, names, raw, scheduler, ticket, started, done)

    def quick_ended(self) -> None:
        """A request of :meth:`start_quick_wire` is no longer in flight."""
        self._inflight -= 1

    async def _infer_encoded_traced(
        self,
        codec: InferCodec[RawT, DecodedT, OutT],
        model: str,
        version: str,
        raw: RawT,
        trace: Trace,
    ) -> OutT:
        read_start, read_end, send_start, send_end = codec.trace_stamps
        if read_start:
            trace.stamp(read_start)
        decoded = codec.decode(raw, model, version)
        if read_end:
            trace.stamp(read_end)
        response = await self.infer(codec.request(decoded), trace)
        if send_start:
            trace.stamp(send_start)
        encoded = codec.encode(decoded, response)
        if send_end:
            trace.stamp(send_end)
        return encoded

    def wire_answer(
        self,
        codec: InferCodec[RawT, DecodedT, OutT],
        loaded: LoadedVersion,
        model: str,
        version: str,
        raw: RawT,
        ran: tuple[ScheduledResult, int],
        elapsed: int,
    ) -> OutT:
        """The encoded response of a request that ran on the wire lane: the instance's own
        encoding, or the result it gave back finished here (errors raise)."""
        scheduled, batch = ran
        result = scheduled.result
        if log.isEnabledFor(VERBOSE):
            if result.error is not None:
                log.debug("%s Infer failed: %s", _request_tag(None), result.error.message)
            else:
                log.debug(
                    "%s completed: model %s version %d, %.3f ms (%s, decoded by the instance)",
                    _request_tag(None),
                    loaded.name,
                    loaded.version,
                    elapsed / 1e6,
                    codec.lane,
                )
        if result.encoded is not None:
            record_ran(loaded, batch, elapsed, scheduled)
            return codec.encoded(result.encoded)
        decoded = codec.decode(raw, model, version)
        response = self._respond(loaded, codec.request(decoded), batch, scheduled, elapsed)
        return codec.encode(decoded, response)

    def _version(self, name: str, version: str) -> LoadedVersion:
        """The version a request names (raises NOT_FOUND/UNAVAILABLE as :meth:`is_decoupled`)."""
        try:
            return self.manager.get(name, version)
        except RepokitError:
            if self._exiting:  # the models are unloading: say why, as admit() does
                raise unavailable("Server exiting") from None
            raise

    async def infer_stream(
        self, request: InferRequest, control: RequestControl | None = None
    ) -> AsyncGenerator[InferResponse, None]:
        """The responses of a decoupled model as it sends them; the last one has ``final``
        set, unless the model ended with an empty final flag (see repokit.core.decoupled)."""
        loaded, prepared = self.admit(request)
        held = self.shared_memory.hold(prepared.shm_regions) if prepared.shm_regions else []
        self._inflight += 1
        try:
            async for response in stream_responses(
                loaded,
                request,
                prepared.backend_request,
                prepared.batch_size,
                self.shared_memory,
                control,
            ):
                yield response
        finally:
            self._inflight -= 1
            if held:
                self.shared_memory.release(held)

    async def check_admission(self, request: InferRequest) -> None:
        """Raise what :meth:`admit` raises for ``request`` (a frontend that answers a refusal
        apart from a failure while the request runs); nothing runs."""
        self.admit(request)

    async def infer_any(self, request: InferRequest) -> AsyncGenerator[InferResponse, None]:
        """The responses of a request to any model: a decoupled model's as it sends them
        (:meth:`infer_stream`), another's one response (:meth:`infer`)."""
        if self.is_decoupled(request.model_name, request.model_version):
            async for response in self.infer_stream(request):
                yield response
        else:
            yield await self.infer(request)

    def _respond(
        self,
        loaded: LoadedVersion,
        request: InferRequest,
        batch: int,
        scheduled: ScheduledResult,
        elapsed: int,
    ) -> InferResponse:
        """The response of a request that ran, counted in the statistics (errors raise)."""
        response = self._finish(loaded, request, batch, scheduled, elapsed)
        if log.isEnabledFor(VERBOSE_DETAIL):  # --log-verbose 2
            for tensor in response.outputs:
                log.log(
                    VERBOSE_DETAIL,
                    "%s add response output: output: %s, type: %s, shape: %s",
                    _request_tag(request),
                    tensor.name,
                    tensor.datatype,
                    list(tensor.shape),
                )
        return response

    def _finish(
        self,
        loaded: LoadedVersion,
        request: InferRequest,
        batch: int,
        scheduled: ScheduledResult,
        elapsed: int,
    ) -> InferResponse:
        """:meth:`_respond` without its log lines (for callers that know nothing is logged)."""
        result = scheduled.result
        if result.error is not None:
            record_failed(loaded, elapsed)
            raise result.error
        try:
            response = finish_outputs(loaded, request, result, self.shared_memory)
        except RepokitError:
            loaded.stats.record_failure(elapsed, "OTHER")
            raise
        record_ran(loaded, batch, elapsed, scheduled)
        return response

    # --- statistics & metrics ----------------------------------------------------------
    def model_statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """{"model_stats": [...]} exactly as Triton's statistics extension JSON."""
        if not name:
            loaded = self.manager.all_ready()
        elif not version:
            loaded = self.manager.ready_versions(name)
            if not loaded:
                raise invalid_arg(f"requested model '{name}' is not available")
        else:
            try:
                loaded = [self.manager.get(name, version)]
            except RepokitError as exc:
                if not self.manager.ready_versions(name):
                    raise invalid_arg(f"requested model '{name}' is not available") from exc
                raise invalid_arg(
                    f"requested model version is not available for model '{name}'"
                ) from exc
        return {"model_stats": [v.stats.to_json() for v in loaded]}

    def metrics_text(self) -> str:
        """Prometheus text exposition with Triton's nv_* families."""
        namespaced = self.settings.model_namespacing
        sources = [
            MetricSource(
                stats=v.stats,
                pending=v.scheduler.pending_count if v.scheduler is not None else 0,
                tags=tuple(sorted(v.config.metric_tags.items())),
                namespace=str(v.directory.parent) if namespaced else "",
            )
            for v in self.manager.all_ready()
        ]
        cpu = self._cpu.render() if self._cpu is not None else []
        return (
            render_metrics(sources, cpu, self.settings.metrics, self.manager.response_cache)
            + self.bridge.custom_metrics.render()
        )

    # --- repository ----------------------------------------------------------------------
    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return self.manager.index(ready_only)

    async def load_model(
        self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        self._inflight_control += 1
        try:
            await self.manager.load(name, config_json, files)
        finally:
            self._inflight_control -= 1

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        self._inflight_control += 1
        try:
            await self.manager.unload(name, unload_dependents)
        finally:
            self._inflight_control -= 1

    # --- system shared memory -----------------------------------------------------------
    def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.shared_memory.register(name, key, offset, byte_size)

    def shm_unregister(self, name: str = "") -> None:
        """An empty name unregisters every region."""
        self.shared_memory.unregister(name)

    def shm_status(self, name: str = "") -> list[dict[str, Any]]:
        """[{"name", "key", "offset", "byte_size"}]; unknown name -> NOT_FOUND."""
        return self.shared_memory.status(name)

    # --- logging ------------------------------------------------------------------------
    def log_settings(self) -> dict[str, Any]:
        return self._logs.get()

    def update_log_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        return self._logs.update(settings)

    # --- trace extension ------------------------------------------------------------------
    def _trace_model(self, model: str) -> None:
        """A model named by a trace setting request must be ready (any version)."""
        if model and not self.model_ready(model):
            raise invalid_arg(f"Request for unknown model : {model}")

    def trace_settings(self, model: str = "") -> dict[str, str | list[str]]:
        """The global setting, or the one ``model``'s requests are traced with."""
        self._trace_model(model)
        return self.tracing.settings(model)

    def update_trace_settings(
        self, model: str, changes: dict[str, list[str] | None]
    ) -> dict[str, str | list[str]]:
        """Change the global setting (``model`` "") or a model's: ``{name: values}``, an
        empty list or None clears a setting (repokit.core.tracing.manager); the result."""
        self._trace_model(model)
        return self.tracing.update(model, changes)
