"""ModelStreamInfer: one bidirectional stream, requests handled as they arrive.

Each request becomes a task, so independent requests run concurrently; the responses of
requests for models that are not decoupled are written in the order the requests came (a
response waits for those of the requests before it), as Triton 2.51's stream handler writes
them (``EnqueueForResponse`` / ``WriteResponseIfReady``: one response per request, in request
order), and a decoupled model's responses as they come. Requests of one sequence (same model
and ``sequence_id``) are chained so the core sees them in arrival order: a request goes to the
core once the one before it in its sequence went (for a model that is not decoupled, the moment
it is handed over: the path to the scheduler's queue does not yield, so it is queued first),
not once it is answered, so the sequence's requests wait in the sequence batcher's queue
together, as Triton's stream handler queues them; a decoupled model's request waits until the
one before it finished.
Failures go in-band in ``error_message`` with the request's id (Triton 2.51 sets no model name
or version there), and the stream stays open (Triton's ``stream_infer_handler.cc``). A
message that is not a valid request (:class:`~repokit.frontends.grpc.parsing.Unparsable`) is
answered the same way, with no id, and the stream goes on (Triton 2.51 ends the stream there,
status OK, the rest unanswered). Every response carries the ``triton_final_response`` parameter.

Decoupled models: ``InferenceService.infer_stream(request)`` yields the responses as the model
sends them; each is sent with ``triton_final_response`` false, except one the model flagged
final (true). A model that ends with an empty final flag gets an empty final response (the
request's id, model name and version, ``triton_final_response=true``) only if the request set
``triton_enable_empty_final_response=true``, as Triton does. A client that closes the stream
cancels its open requests (the model sees ``request.is_cancelled()``).

``triton_grpc_error: true`` in the stream's metadata (Triton's "GRPC status codes" mode): the
first request that fails while it runs (an error from the model or its scheduler) ends the
stream with that error's gRPC status and message instead of an in-band ``error_message``; the
other requests' responses are dropped from then on. A request the core refuses before it runs
(it cannot be decoded, names an unknown model, has wrong inputs) is still answered in-band, as
Triton 2.51 does (``stream_infer_handler.cc``: only response errors finish the stream).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable

from google.protobuf.message import DecodeError

from repokit.core.service import InferenceService
from repokit.errors import RepokitError
from repokit.frontends.grpc.codec import (
    DecodedRequest,
    decode_infer_request,
    encode_infer_response_bytes,
    parse_infer_request,
)
from repokit.frontends.grpc.infer_codec import GrpcInferCall, GrpcInferCodec
from repokit.frontends.grpc.messages import parse_model_version
from repokit.frontends.grpc.parsing import Unparsable
from repokit.protocol.generated import grpc_service_pb2 as pb
from repokit.protocol.grpc_raw import message_bytes, stream_response
from repokit.protocol.types import InferResponse

FINAL_RESPONSE_PARAM = "triton_final_response"

_log = logging.getLogger(__name__)

_END = None
GRPC_ERROR_HEADER = "triton_grpc_error"


class StreamFailed:
    """The stream ends with ``error`` as its gRPC status (``triton_grpc_error`` mode)."""

    __slots__ = ("error",)

    def __init__(self, error: RepokitError) -> None:
        self.error = error


# a response: a message, or one serialized already (see serialize_stream_response)
StreamResponse = pb.ModelStreamInferResponse | bytes
_Item = StreamResponse | StreamFailed | None


def _sequence_key(msg: pb.ModelInferRequest) -> Hashable | None:
    """(model, sequence id) when the request belongs to a sequence, else None."""
    param = msg.parameters.get("sequence_id")
    if param is None:
        return None
    kind = param.WhichOneof("parameter_choice")
    if kind == "int64_param" and param.int64_param != 0:
        return (msg.model_name, param.int64_param)
    if kind == "string_param" and param.string_param:
        return (msg.model_name, param.string_param)
    return None


def _final_flagged(response: InferResponse, final: bool) -> bytes:
    """The serialized stream response of ``response`` with ``triton_final_response``."""
    return stream_response(encode_infer_response_bytes(response), final)


def serialize_stream_response(response: StreamResponse) -> bytes:
    """ModelStreamInfer's response serializer: responses may be serialized already."""
    if isinstance(response, bytes):
        return response
    body: bytes = response.SerializeToString()
    return body


def error_response(msg: pb.ModelInferRequest, message: str) -> pb.ModelStreamInferResponse:
    """A failed request: the message in-band, and (as Triton 2.51 does) only the request id."""
    return pb.ModelStreamInferResponse(
        error_message=message, infer_response=pb.ModelInferResponse(id=msg.id)
    )


def _forget(
    chains: dict[Hashable, asyncio.Future[None]], key: Hashable, went: asyncio.Future[None]
) -> Callable[[asyncio.Task[None]], None]:
    """A done-callback dropping a finished request from its sequence chain if still the last
    (and letting the next one go, whatever happened to it)."""

    def forget(_task: asyncio.Task[None]) -> None:
        _release(went)
        if chains.get(key) is went:
            del chains[key]

    return forget


def _release(went: asyncio.Future[None] | None) -> None:
    """The next request of the sequence may go to the core."""
    if went is not None and not went.done():
        went.set_result(None)


async def stream_calls(
    raw_messages: AsyncIterator[bytes],
) -> AsyncIterator[GrpcInferCall | Unparsable]:
    """The stream's messages as they arrived and parsed (large ones with their raw input
    contents apart, as unary calls); bytes that are no ModelInferRequest as
    :class:`Unparsable`."""
    index = 0
    async for raw in raw_messages:
        index += 1
        try:
            message, raw_contents = parse_infer_request(raw)
        except DecodeError:
            yield Unparsable(index, len(raw), pb.ModelInferRequest.DESCRIPTOR.full_name)
            continue
        yield GrpcInferCall(raw, message, raw_contents)


class StreamSession:
    """The state of one ModelStreamInfer call.

    A request for a model that is not decoupled runs as a unary ModelInfer does, through
    :meth:`InferenceService.infer_encoded` with the gRPC codec (a small one may take the
    model's wire lane), and its encoded response goes into the stream's response as it is
    (:func:`repokit.protocol.grpc_raw.stream_response`); in ``triton_grpc_error`` mode, where a
    refusal before the request runs and a failure while it runs are answered differently,
    and for decoupled models it is decoded here and runs on the standard path."""

    def __init__(
        self,
        service: InferenceService,
        requests: AsyncIterator[GrpcInferCall | Unparsable],
        grpc_error: bool = False,
        codec: GrpcInferCodec | None = None,
        forwarded: dict[str, str] | None = None,
    ) -> None:
        """``forwarded``: the stream's headers that each request passes to the model as
        parameters (``--grpc-header-forward-pattern``)."""
        self._service = service
        self._requests = requests
        self._grpc_error = grpc_error
        self._codec = codec or GrpcInferCodec()
        self._forwarded = forwarded
        # responses of non-decoupled requests not yet written, in request order
        self._in_order: deque[asyncio.Future[list[_Item]]] = deque()
        self.failure: RepokitError | None = None  # set when the stream ends with a status

    async def responses(self) -> AsyncIterator[StreamResponse]:
        """The stream's responses; in ``triton_grpc_error`` mode they stop at the first
        failure, which is then in :attr:`failure`."""
        out: asyncio.Queue[_Item] = asyncio.Queue()
        reader = asyncio.create_task(self._read(out))
        try:
            while True:
                item = await out.get()
                if item is _END:
                    break
                if isinstance(item, StreamFailed):
                    self.failure = item.error
                    break
                yield item
        finally:
            if not reader.done():
                reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def _read(self, out: asyncio.Queue[_Item]) -> None:
        tasks: set[asyncio.Task[None]] = set()
        # per sequence: a future set once its last request went to the core
        last_of_sequence: dict[Hashable, asyncio.Future[None]] = {}
        try:
            async for call in self._requests:
                if isinstance(call, Unparsable):
                    await out.put(error_response(pb.ModelInferRequest(), call.message))
                    continue
                key = _sequence_key(call.message)
                previous = went = None
                if key is not None:
                    previous = last_of_sequence.get(key)
                    went = asyncio.get_running_loop().create_future()
                slot = None
                if not self._decoupled(call.message):
                    slot = asyncio.get_running_loop().create_future()
                    self._in_order.append(slot)
                task = asyncio.create_task(self._handle(call, previous, out, went, slot))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                if key is not None and went is not None:
                    last_of_sequence[key] = went
                    task.add_done_callback(_forget(last_of_sequence, key, went))
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            raise
        except Exception:  # the client went away mid-read; nothing left to answer
            _log.debug("stream reader ended", exc_info=True)
            for task in tasks:
                task.cancel()
        await out.put(_END)

    async def _handle(
        self,
        call: GrpcInferCall,
        previous: asyncio.Future[None] | None,
        out: asyncio.Queue[_Item],
        went: asyncio.Future[None] | None = None,
        slot: asyncio.Future[list[_Item]] | None = None,
    ) -> None:
        """Run one request; its responses go to ``out`` as they come, or, with ``slot`` (a
        model that is not decoupled), into it, written once the requests before it were."""
        items: list[_Item] = []
        put = items.append if slot is not None else out.put_nowait
        try:
            if previous is not None:
                await asyncio.shield(previous)
            await self._answer(call, went, put)
        finally:
            if slot is not None:
                slot.set_result(items)
                self._write_in_order(out)

    def _write_in_order(self, out: asyncio.Queue[_Item]) -> None:
        """Write the responses whose turn came (every request before them was answered)."""
        in_order = self._in_order
        while in_order and in_order[0].done():
            for item in in_order.popleft().result():
                out.put_nowait(item)

    def _decoupled(self, msg: pb.ModelInferRequest) -> bool:
        try:
            return self._service.is_decoupled(
                msg.model_name, parse_model_version(msg.model_version)
            )
        except RepokitError:  # answered in-band, in order, by _answer
            return False

    async def _answer(
        self,
        call: GrpcInferCall,
        went: asyncio.Future[None] | None,
        put: Callable[[_Item], None],
    ) -> None:
        msg = call.message
        issued = [False]  # the request reached the core (its errors may end the stream)
        try:
            async for response in self._run(call, issued, went):
                put(response)
        except RepokitError as error:
            if self._grpc_error and issued[0]:
                put(StreamFailed(error))
            else:
                put(error_response(msg, error.message))
        except Exception as exc:  # never let one request kill the stream
            _log.exception("stream request failed")
            put(error_response(msg, f"internal error: {type(exc).__name__}: {exc}"))

    async def _run(
        self, call: GrpcInferCall, issued: list[bool], went: asyncio.Future[None] | None = None
    ) -> AsyncIterator[StreamResponse]:
        """``went``: set when the request is handed to the core, unless decoupled (the next
        request of its sequence may go then; see the module docstring)."""
        service = self._service
        msg = call.message
        version = parse_model_version(msg.model_version)
        decoupled = service.is_decoupled(msg.model_name, version)
        forwarded = self._forwarded
        if not decoupled and not self._grpc_error:
            issued[0] = True
            if forwarded:
                call = call._replace(forwarded=forwarded)
            _release(went)  # its waiter runs after this task's next yield: once it is queued
            body = await service.infer_encoded(self._codec, msg.model_name, version, call)
            yield stream_response(message_bytes(body), True)
            return
        decoded = decode_infer_request(msg, call.raw_contents)
        decoded.request.model_version = version
        if forwarded:
            decoded.request.parameters.update(forwarded)
        if self._grpc_error:  # a request the core refuses is answered in-band all the same
            await service.check_admission(decoded.request)
        issued[0] = True
        if not decoupled:
            _release(went)
            response = await service.infer(decoded.request)
            yield _final_flagged(response, True)
            return
        async for item in self._run_decoupled(decoded):
            yield item

    async def _run_decoupled(self, decoded: DecodedRequest) -> AsyncIterator[StreamResponse]:
        request = decoded.request
        ended = False
        async for response in self._service.infer_stream(request):
            ended = response.final
            yield _final_flagged(response, response.final)
        if not ended and decoded.enable_empty_final_response:
            empty = pb.ModelInferResponse(
                id=request.id, model_name=request.model_name, model_version=request.model_version
            )
            yield stream_response(empty.SerializeToString(), True)
