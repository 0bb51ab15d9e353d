"""One coroutine per HTTP endpoint: decode the request, call the service, encode the reply.

Method and restriction checks happen in the dispatcher (:mod:`.app`); these handlers follow
Triton's ``HTTPAPIServer::Handle*`` for everything after that, with Triton's messages.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import socket
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from repokit.core.quick_wire import QuickWire
from repokit.core.service import InferenceService
from repokit.core.tracing.setting import SETTING_KEYS as TRACE_SETTING_KEYS
from repokit.core.tracing.trace import Trace
from repokit.errors import Code, RepokitError, invalid_arg, not_found
from repokit.frontends.cuda_shared_memory import check_cuda_register, cuda_register_refused
from repokit.frontends.header_forwarding import HeaderForwarding
from repokit.frontends.http.compression import choose_response_encoding, compress, decompress_body
from repokit.frontends.http.generate import (
    NOT_ONE_RESPONSE,
    RESPONSE_ERROR_STATUS,
    SSE_CONTENT_TYPE,
    decode_generate_request,
    encode_generate_response,
    json_body,
    parse_generate_document,
    sse_event,
)
from repokit.frontends.http.infer_codec import DECOUPLED_MESSAGE, HttpInferBody, HttpInferCodec
from repokit.frontends.http.infer_request import parse_json_document, parse_model_version
from repokit.frontends.http.infer_response import EncodedResponse
from repokit.frontends.http.messages import HttpRequest, HttpResponse
from repokit.frontends.http.responses import JSON, empty_response, error_response, json_response
from repokit.frontends.http.routing import Route
from repokit.frontends.status import http_status
from repokit.protocol.types import InferResponse

CLIENT_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
_HEADER_LENGTH = "inference-header-content-length"
# binary bodies of at least this many bytes are written part by part instead of joined
STREAM_THRESHOLD = 1 << 16


def _compressed(encoded: EncodedResponse, encoding: str) -> HttpResponse:
    headers = {"Content-Encoding": encoding}
    if encoded.header_length is not None:
        headers["Inference-Header-Content-Length"] = str(encoded.header_length)
    return HttpResponse(
        compress(encoded.body, encoding), headers=headers, content_type=encoded.content_type
    )


def _infer_response(encoded: EncodedResponse, accept: str | None) -> HttpResponse:
    """The response to an infer request (``accept``: its ``Accept-Encoding``)."""
    if accept:
        chosen = choose_response_encoding(accept)
        if chosen != "identity":
            return _compressed(encoded, chosen)
    if encoded.header_length is None:
        return HttpResponse(encoded.head, content_type=encoded.content_type)
    out_headers = {"Inference-Header-Content-Length": str(encoded.header_length)}
    if encoded.size < STREAM_THRESHOLD:
        return HttpResponse(encoded.body, headers=out_headers, content_type=encoded.content_type)
    # Large binary outputs go to the socket as they are, after the JSON header: joining
    # them would copy every byte once more.
    return HttpResponse(headers=out_headers, content_type=encoded.content_type, parts=encoded.parts)


class Endpoints:
    def __init__(
        self,
        service: InferenceService,
        max_input_size: int,
        allow_client_shm: bool,
        forward: HeaderForwarding | None = None,
    ) -> None:
        self.service = service
        self.forward = forward  # --http-header-forward-pattern
        self.max_input_size = max_input_size
        self.allow_client_shm = allow_client_shm
        self.codec = HttpInferCodec(max_input_size)

    # --- health & metadata ---------------------------------------------------------------

    async def health_live(self, request: HttpRequest, route: Route) -> HttpResponse:
        return empty_response(200 if self.service.server_live() else 400)

    async def health_ready(self, request: HttpRequest, route: Route) -> HttpResponse:
        return empty_response(200 if self.service.server_ready() else 400)

    async def server_metadata(self, request: HttpRequest, route: Route) -> HttpResponse:
        return json_response(self.service.server_metadata())

    async def model_ready(self, request: HttpRequest, route: Route) -> HttpResponse:
        version = parse_model_version(route.version)
        if not self.service.model_ready(route.model, version):
            return error_response(400, "Model version not ready")
        return empty_response(200)

    async def model_metadata(self, request: HttpRequest, route: Route) -> HttpResponse:
        version = parse_model_version(route.version)
        return json_response(self.service.model_metadata(route.model, version))

    async def model_config(self, request: HttpRequest, route: Route) -> HttpResponse:
        version = parse_model_version(route.version)
        return json_response(self.service.model_config_json(route.model, version))

    async def statistics(self, request: HttpRequest, route: Route) -> HttpResponse:
        version = parse_model_version(route.version)
        return json_response(self.service.model_statistics(route.model, version))

    # --- inference -------------------------------------------------------------------------

    async def infer(self, request: HttpRequest, route: Route) -> HttpResponse | None:
        headers = request.headers
        get = dict.get  # the protocol gives the names in lowercase
        encoding = get(headers, "content-encoding")
        tracing = self.service.tracing
        if encoding is None and not tracing.enabled:
            # the usual request: the service's one lookup refuses an unknown or decoupled
            # model (with this protocol's message) before anything runs
            version = parse_model_version(route.version) if route.version else ""
        else:
            version = self.infer_version(route)  # refused before decompressing or sampling
        if tracing.enabled:  # every request is counted by the sampling (rate, count)
            trace = tracing.sample(route.model, get(headers, "traceparent"))
            if trace is not None:
                try:
                    return await self._infer_traced(request, route.model, version, trace)
                finally:
                    trace.finish()
        body = request.body
        if encoding is not None:
            try:
                body = decompress_body(body, encoding, self.max_input_size)
            except RepokitError as exc:
                if exc.code is Code.UNSUPPORTED:
                    response = error_response(http_status(exc.code), exc.message)
                    response.headers["Accept-Encoding"] = "gzip, deflate"
                    return response
                raise
        forwarded = None if self.forward is None else self.forward.parameters(headers.items())
        encoded = await self.run_infer(
            route.model, version, body, get(headers, _HEADER_LENGTH), None, forwarded
        )
        return _infer_response(encoded, get(headers, "accept-encoding"))

    def quick_infer(
        self,
        request: HttpRequest,
        route: Route,
        done: Callable[[HttpResponse | Exception], None],
    ) -> QuickWire[HttpInferBody, EncodedResponse] | None:
        """:meth:`infer` driven by callbacks (:mod:`repokit.core.quick_wire`) when the
        request needs nothing of the endpoint but its body (no content or header-length
        coding, tracing or forwarded headers): ``done`` gets the response :meth:`infer` would
        return (an error as the dispatcher answers it), or any other exception it would
        raise. None: the request takes :meth:`infer`."""
        headers = request.headers
        get = dict.get
        if (
            get(headers, "content-encoding") is not None
            or get(headers, _HEADER_LENGTH) is not None
            or self.service.tracing.enabled
            or self.forward is not None
        ):
            return None
        accept = get(headers, "accept-encoding")
        if accept and choose_response_encoding(accept) != "identity":
            return None
        if route.version:
            try:
                version = parse_model_version(route.version)
            except RepokitError:
                return None  # infer refuses it
        else:
            version = ""
        service = self.service
        loaded = service.quick_version(route.model, version)
        if loaded is None:
            return None

        def answered(encoded: EncodedResponse | Exception) -> None:
            if isinstance(encoded, RepokitError):  # as the dispatcher answers it
                done(error_response(http_status(encoded.code), encoded.message))
            elif isinstance(encoded, Exception):
                done(encoded)
            else:
                done(_infer_response(encoded, None))

        raw = HttpInferBody(request.body, None, None)
        names = (route.model, version)
        return service.start_quick_wire(self.codec, loaded, names, raw, answered)

    def infer_version(self, route: Route) -> str:
        """The version an infer route names; raises for unknown models and decoupled ones."""
        version = parse_model_version(route.version) if route.version else ""
        if self.service.is_decoupled(route.model, version):
            raise RepokitError(Code.UNSUPPORTED, DECOUPLED_MESSAGE)
        return version

    def run_infer(
        self,
        model: str,
        version: str,
        body: bytes | memoryview,
        header_length_value: str | None,
        trace: Trace | None = None,
        forwarded: dict[str, str] | None = None,
    ) -> Awaitable[EncodedResponse]:
        """Run an (uncompressed) infer body and encode the response (one call into the core).
        A traced request records HTTP_RECV_END once decoded, and takes no wire lane.
        ``forwarded``: headers to add to the request's parameters (``self.forward``)."""
        raw = HttpInferBody(body, header_length_value, forwarded)
        return self.service.infer_encoded(self.codec, model, version, raw, trace)

    async def _infer_traced(
        self, request: HttpRequest, model: str, version: str, trace: Trace
    ) -> HttpResponse | None:
        """A sampled infer request: HTTP_RECV_START when the handler takes it (the protocol has read
        the body), HTTP_RECV_END once decoded, HTTP_SEND_START/END around writing the
        response to the connection."""
        trace.stamp("HTTP_RECV_START")
        headers = request.headers
        body = request.body
        encoding = headers.get("content-encoding")
        if encoding is not None:
            body = decompress_body(body, encoding, self.max_input_size)
        forwarded = None if self.forward is None else self.forward.parameters(headers.items())
        encoded = await self.run_infer(
            model, version, body, headers.get(_HEADER_LENGTH), trace, forwarded
        )
        trace.stamp("HTTP_SEND_START")
        out_headers = {"content-length": str(encoded.size)}
        if encoded.header_length is not None:
            out_headers["Inference-Header-Content-Length"] = str(encoded.header_length)
        parts: list[bytes | memoryview] = list(encoded.parts)
        accept = headers.get("accept-encoding")
        chosen = choose_response_encoding(accept) if accept else "identity"
        if chosen != "identity":
            compressed = compress(encoded.body, chosen)
            out_headers["Content-Encoding"] = chosen
            out_headers["content-length"] = str(len(compressed))
            parts = [compressed]
        response = await request.respond(headers=out_headers, content_type=encoded.content_type)
        for part in parts:
            await response.send(part)
        await response.eof()
        trace.stamp("HTTP_SEND_END")
        return None

    async def generate(self, request: HttpRequest, route: Route) -> HttpResponse | None:
        """``/generate`` and ``/generate_stream`` (:mod:`.generate`), through the service as
        every inference; errors before the model runs are plain JSON errors."""
        version = parse_model_version(route.version) if route.version else ""
        metadata = self.service.model_metadata(route.model, version)
        if request.headers.get("content-encoding", "identity").strip().lower() != "identity":
            raise invalid_arg("Unsupported content-encoding, only 'identity' is supported.")
        document = parse_generate_document(request.body, self.max_input_size)
        infer_request = decode_generate_request(route.model, version, document, metadata)
        await self.service.check_admission(infer_request)  # refusals: a plain JSON error
        answers = _answers(self.service.infer_any(infer_request))
        try:
            if route.action == "generate_stream":
                await _send_events(request, answers)
                return None
            collected = [answer async for answer in answers]
        finally:
            await answers.aclose()  # a client that went away cancels the request
        # exactly one response is expected (a decoupled model may send more or none)
        first = collected[0] if collected else None
        if len(collected) != 1:
            body = json_body({"error": NOT_ONE_RESPONSE})
        elif isinstance(first, RepokitError):
            body = json_body({"error": first.message})
        else:
            assert first is not None
            body = json_body(encode_generate_response(first))
        return HttpResponse(body, status=_status_of(first), content_type=JSON)

    # --- repository ------------------------------------------------------------------------

    def _optional_json(self, request: HttpRequest) -> dict[str, Any] | None:
        body = request.body
        if not body:
            return None
        document = parse_json_document(body, self.max_input_size)
        if not isinstance(document, dict):
            raise invalid_arg("the request body must be a JSON object")
        return document

    async def repository_index(self, request: HttpRequest, route: Route) -> HttpResponse:
        # Triton ignores a repository name on the index (it only rejects it on load/unload)
        document = self._optional_json(request)
        ready = False
        if document is not None and "ready" in document:
            if type(document["ready"]) is not bool:
                raise invalid_arg("Invalid value for 'ready': expected a boolean")
            ready = document["ready"]
        return json_response(self.service.repository_index(ready_only=ready))

    async def repository_control(self, request: HttpRequest, route: Route) -> HttpResponse:
        if route.repository:
            raise RepokitError(Code.UNSUPPORTED, "'repository_name' specification is not supported")
        document = self._optional_json(request)
        params = document.get("parameters") if document is not None else None
        if params is not None and not isinstance(params, dict):
            raise invalid_arg("Unable to parse 'parameters': attempt to access JSON non-object")
        if route.action == "load":
            config_json, files = _load_parameters(params or {})
            await self.service.load_model(route.model, config_json, files)
        else:
            unload_dependents = False
            if params and "unload_dependents" in params:
                value = params["unload_dependents"]
                if type(value) is not bool:
                    raise invalid_arg(
                        "Unable to parse 'unload_dependents': attempt to access JSON "
                        "non-boolean as boolean"
                    )
                unload_dependents = value
            await self.service.unload_model(route.model, unload_dependents=unload_dependents)
        return empty_response(200, "application/json")

    # --- shared memory ---------------------------------------------------------------------

    async def system_shm(self, request: HttpRequest, route: Route) -> HttpResponse:
        if route.action == "status":
            return json_response(self.service.shm_status(route.region))
        if not self.allow_client_shm:
            raise RepokitError(Code.UNSUPPORTED, CLIENT_SHM_DISABLED)
        if route.action == "unregister":
            self.service.shm_unregister(route.region)
            return empty_response(200, "application/json")
        if not route.region:
            raise invalid_arg("'region name' is necessary to register system shared memory region")
        document = parse_json_document(request.body, self.max_input_size)
        if not isinstance(document, dict) or "key" not in document:
            raise invalid_arg("Shared memory register request has no 'key' field")
        key = document["key"]
        if not isinstance(key, str):
            raise invalid_arg("attempt to access JSON non-string as string")
        offset = document.get("offset", 0)
        if type(offset) is not int or offset < 0:
            raise invalid_arg("attempt to access JSON non-unsigned-integer as unsigned-integer")
        if "byte_size" not in document:
            raise invalid_arg("Shared memory register request has no 'byte_size' field")
        byte_size = document["byte_size"]
        if type(byte_size) is not int or byte_size < 0:
            raise invalid_arg("attempt to access JSON non-unsigned-integer as unsigned-integer")
        self.service.shm_register(route.region, key, offset, byte_size)
        return empty_response(200, "application/json")

    async def cuda_shm(self, request: HttpRequest, route: Route) -> HttpResponse:
        """As Triton 2.51's release build (built with GPU support) on a machine without GPUs:
        no region can ever be registered; a register request is read and checked as Triton
        does, and a well-formed one fails where Triton's CUDA IPC open fails."""
        if route.action == "status":
            if route.region:
                raise not_found(f"Unable to find cuda shared memory region: '{route.region}'")
            return json_response([])
        if not self.allow_client_shm:
            raise RepokitError(Code.UNSUPPORTED, CLIENT_SHM_DISABLED)
        if route.action == "register":
            if not route.region:
                raise invalid_arg(
                    "'region name' is necessary to register cuda shared memory region"
                )
            document = parse_json_document(request.body, self.max_input_size)
            check_cuda_register(document)
            raise cuda_register_refused(route.region)
        return empty_response(200, "application/json")

    # --- logging & trace -------------------------------------------------------------------

    async def logging(self, request: HttpRequest, route: Route) -> HttpResponse:
        if request.method == "POST":
            document = parse_json_document(request.body, self.max_input_size)
            if not isinstance(document, dict):
                raise invalid_arg("the logging request body must be a JSON object")
            self.service.update_log_settings(_log_updates(document))
        return json_response(self.service.log_settings())

    async def trace(self, request: HttpRequest, route: Route) -> HttpResponse:
        """``/v2[/models/{m}]/trace/setting``: the model is checked before the body is read,
        as in Triton."""
        model = route.model or ""
        if request.method != "POST":
            return json_response(self.service.trace_settings(model))
        self.service.trace_settings(model)
        document = parse_json_document(request.body, self.max_input_size)
        if not isinstance(document, dict):
            raise invalid_arg("the trace setting request body must be a JSON object")
        return json_response(self.service.update_trace_settings(model, _trace_updates(document)))


async def _answers(
    responses: AsyncGenerator[InferResponse, None],
) -> AsyncGenerator[InferResponse | RepokitError, None]:
    """A decoupled model's responses; an error is the last answer (it ends the request)."""
    try:
        async for response in responses:
            yield response
    except RepokitError as exc:
        yield exc
    finally:
        await responses.aclose()  # cancels a request the client left


def _status_of(first: InferResponse | RepokitError | None) -> int:
    """The status of a generate answer: its first response's. Triton 2.51 answers 400 for a
    first response that is an error whatever its code (its generate handler reads the code of
    an error it has already freed), so an error after admission is 400 here too."""
    return RESPONSE_ERROR_STATUS if isinstance(first, RepokitError) else 200


async def _send_events(
    request: HttpRequest, answers: AsyncGenerator[InferResponse | RepokitError, None]
) -> None:
    """Server-Sent Events, one per answer; the status is set by the first one (or 200 when
    the model sent only the final flag); the stream ends after the last. A response that
    cannot be written as JSON (an FP16 output) is an error event in its place, as in Triton."""
    first = await anext(answers, None)
    _no_delay(request)
    event, failed = _event(first) if first is not None else (b"", False)
    status = RESPONSE_ERROR_STATUS if failed else 200
    response = await request.respond(status=status, content_type=SSE_CONTENT_TYPE)
    if first is not None:
        await response.send(event)
    async for answer in answers:
        await response.send(_event(answer)[0])
    await response.eof()


def _no_delay(request: HttpRequest) -> None:
    """Events go out as they come: without TCP_NODELAY the second small write of a stream
    waits for the client's delayed ACK (40 ms a stream: ``benchmarks/README.md``)."""
    transport = request.transport
    sock = None if transport is None else transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _event(answer: InferResponse | RepokitError) -> tuple[bytes, bool]:
    """The event of one answer and whether it is an error."""
    if not isinstance(answer, RepokitError):
        try:
            return sse_event(encode_generate_response(answer)), False
        except RepokitError as exc:
            answer = exc
    return sse_event({"error": answer.message}), True


def _load_parameters(params: dict[str, Any]) -> tuple[str | None, dict[str, bytes] | None]:
    config_json: str | None = None
    files: dict[str, bytes] = {}
    for key, value in params.items():
        if not isinstance(value, str):
            raise invalid_arg(
                f"Unable to parse load parameter '{key}': attempt to access JSON non-string "
                "as string"
            )
        if key == "config":
            config_json = value
        elif key.startswith("file:"):
            try:
                files[key] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise invalid_arg(f"'{key}' must be a valid base64 encoded string") from None
        else:
            # Triton's HTTP frontend answers 500 "unexpected error on creating Triton
            # parameter"; an unknown parameter is the client's mistake, so 400 here.
            raise invalid_arg(f"Unrecognized load parameter '{key}' with type 'STRING'")
    return config_json, (files or None)


def _trace_updates(document: dict[str, Any]) -> dict[str, list[str] | None]:
    """The trace extension's JSON request as the core's changes: null clears a setting,
    trace_level is an array of strings, the others strings. Triton answers 500 for a value of
    the wrong JSON type; it is the client's mistake, so 400 here (same message)."""
    updates: dict[str, list[str] | None] = {}
    if "trace_file" in document:
        updates["trace_file"] = None  # the core refuses any change of the file
    for key in TRACE_SETTING_KEYS:
        if key not in document:
            continue
        value = document[key]
        if value is None:
            updates[key] = None
        elif key == "trace_level":
            if not isinstance(value, list):
                raise invalid_arg("attempt to access JSON non-array as array")
            if not all(isinstance(item, str) for item in value):
                raise invalid_arg("attempt to access JSON non-string as string")
            if value:  # an empty array changes nothing, as in Triton
                updates[key] = value
        elif isinstance(value, str):
            if key == "trace_count" and _below_minus_one(value):  # Triton's HTTP wording
                raise invalid_arg(
                    f"Unable to parse 'trace_count'. Expecting value >= -1, got:{value}"
                )
            updates[key] = [value]
        else:
            raise invalid_arg("attempt to access JSON non-string as string")
    return updates


def _below_minus_one(text: str) -> bool:
    try:
        return int(text.strip(), 10) < -1
    except ValueError:
        return False  # the core says why it does not parse


_LOG_BOOLS = ("log_info", "log_warning", "log_error")


def _log_updates(document: dict[str, Any]) -> dict[str, Any]:
    """Validated logging changes (null values are ignored, as in Triton)."""
    if document.get("log_file") is not None:
        raise RepokitError(
            Code.UNSUPPORTED, "log file location can not be updated through network protocol"
        )
    updates: dict[str, Any] = {}
    for key in _LOG_BOOLS:
        value = document.get(key)
        if value is None:
            continue
        if type(value) is not bool:
            raise invalid_arg("attempt to access JSON non-boolean as boolean")
        updates[key] = value
    level = document.get("log_verbose_level")
    if level is not None:
        if type(level) is not int or level < 0:
            raise invalid_arg("attempt to access JSON non-unsigned-integer as unsigned-integer")
        updates["log_verbose_level"] = level
    log_format = document.get("log_format")
    if log_format is not None:
        if not isinstance(log_format, str):
            raise invalid_arg("attempt to access JSON non-string as string")
        if log_format not in ("default", "ISO8601"):
            raise RepokitError(
                Code.UNAVAILABLE, f"invalid argument for --log_format, got: {log_format}"
            )
        updates["log_format"] = log_format
    return updates
