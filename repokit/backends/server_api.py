"""What a backend may ask of the server it runs in, and the per-request control it gets.

:class:`ServerApi` is the narrow view of the serving core that backends receive in
``ModelContext.server`` (``None`` when a backend runs outside a server, e.g. in unit tests):
python models use it for BLS requests (``pb_utils.InferenceRequest.exec``), model control
(``pb_utils.load_model``), custom metrics and their log lines. Requests go through the core's
normal path (``InferenceService.infer`` / ``infer_stream``), so the called model's own checks,
scheduler, batching and statistics apply.

:class:`RequestControl` travels with one request (``BackendRequest.control``) when the caller
wants more than one result: it carries the cancellation flag (set when the client went away or
closed its stream) and, for decoupled models, the sink that receives each response as the
model sends it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol

from repokit.protocol.types import InferRequest, InferResponse

# what a model's BLS or model-control call gets when no server hosts it (``repokit build``
# runs warmup samples that way and recognises it)
NO_SERVER_MESSAGE = (
    "this model runs outside a server: BLS, model control and metrics are unavailable"
)

if TYPE_CHECKING:
    from repokit.backends.base import BackendResult

# (result, final): one response of a decoupled model; ``final`` ends the request
ResponseSink = Callable[["BackendResult | None", bool], None]


class CustomMetricsApi(Protocol):
    def family(self, name: str, description: str, kind: str) -> int: ...

    def metric(self, family: int, labels: dict[str, str], buckets: list[float] | None) -> int: ...

    def update(self, metric: int, op: str, value: float) -> None: ...

    def value(self, metric: int) -> float: ...

    def release(self, family: int, metric: int) -> None: ...


class ServerApi(Protocol):
    """The operations of the serving core a backend may call."""

    @property
    def custom_metrics(self) -> CustomMetricsApi: ...

    @property
    def model_log(self) -> logging.Logger: ...

    def log_verbose_level(self) -> int: ...

    async def infer(self, request: InferRequest, parent: Any = None) -> InferResponse:
        """Run a BLS request; ``parent``: the trace of the request that made it, when it is
        traced and the model passed it (``trace=request.trace()``)."""
        ...

    def infer_stream(
        self, request: InferRequest, control: RequestControl | None = None, parent: Any = None
    ) -> AsyncIterator[InferResponse]: ...

    def is_decoupled(self, name: str, version: str = "") -> bool: ...

    def model_ready(self, name: str, version: str = "") -> bool: ...

    async def load_model(
        self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None: ...

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None: ...


class RequestControl:
    """Cancellation and streamed responses of one request (not thread-safe: event loop only)."""

    __slots__ = ("_on_cancel", "cancelled", "sink")

    def __init__(self, sink: ResponseSink | None = None) -> None:
        self.sink = sink
        self.cancelled = False
        self._on_cancel: list[Callable[[], None]] = []

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the request is cancelled (at once if it already is)."""
        if self.cancelled:
            callback()
        else:
            self._on_cancel.append(callback)

    def cancel(self) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        callbacks, self._on_cancel = self._on_cancel, []
        for callback in callbacks:
            callback()

    def describe(self) -> dict[str, Any]:
        return {"cancelled": self.cancelled, "streaming": self.sink is not None}
