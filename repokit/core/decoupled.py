"""Streamed responses of decoupled models (``InferenceService.infer_stream``).

A decoupled model sends zero, one or many responses per request, during ``execute`` or later
from its own threads. The request goes through the model's scheduler like any other (its
queue, batching and instance choice; the execution ends when ``execute`` returns), with a
:class:`~repokit.backends.server_api.RequestControl` whose sink receives each response as the
backend gets it. :func:`stream_responses` yields them in order, each turned into a protocol
response (requested outputs, reshape, classification, shared memory) as unary responses are;
a response flagged final (or an empty final flag) ends the iteration. The request counts as one
success when it completes (a response error counts as a failure and raises).

Closing the iterator early (the client closed its stream or went away) cancels the request: the
model sees ``request.is_cancelled()`` become True.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from repokit.backends.base import BackendResult
from repokit.backends.server_api import RequestControl
from repokit.core.dispatch import record_failed, record_ran, submit
from repokit.core.loaded_model import LoadedVersion
from repokit.core.outputs import finish_outputs
from repokit.errors import RepokitError
from repokit.protocol.types import InferRequest, InferResponse

if TYPE_CHECKING:
    from repokit.core.shared_memory import SystemSharedMemory

_EXECUTED = object()


async def stream_responses(
    loaded: LoadedVersion,
    request: InferRequest,
    backend_request: Any,
    batch_size: int,
    shared_memory: SystemSharedMemory,
    control: RequestControl | None = None,
) -> AsyncIterator[InferResponse]:
    control = control or RequestControl()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def sink(result: BackendResult | None, final: bool) -> None:
        queue.put_nowait((result, final))

    control.sink = sink
    backend_request.control = control
    started = time.perf_counter_ns()
    task = asyncio.ensure_future(submit(loaded, backend_request, batch_size))
    task.add_done_callback(lambda _: queue.put_nowait(_EXECUTED))
    finished = False
    scheduled = None
    refused = False  # the scheduler refused it: submit counted it already
    try:
        while True:
            item = await queue.get()
            if item is _EXECUTED:
                refused = True
                scheduled, _ = task.result()  # a scheduler refusal raises here
                refused = False
                if scheduled.result.error is not None:
                    raise scheduled.result.error
                if finished:
                    break
                continue
            result, final = item
            if result is not None:
                if result.error is not None:
                    finished = final
                    raise result.error
                response = finish_outputs(loaded, request, result, shared_memory)
                yield replace(response, final=final) if final else response
            if final:
                finished = True
                if scheduled is not None:
                    break
    except RepokitError:
        if not refused:
            record_failed(loaded, time.perf_counter_ns() - started)
        raise
    finally:
        if not finished:
            control.cancel()
        if not task.done():
            task.cancel()
    if scheduled is not None:
        record_ran(loaded, batch_size, time.perf_counter_ns() - started, scheduled)
