"""Register a generated service's handlers with few *registered* methods.

grpc.aio (1.6x and later) keeps one pending call per registered method, plus one for all
other methods, and waits on the whole set for every call it accepts (``asyncio.wait`` with a
done callback on each); so each registered method adds work to every RPC the server takes.
The generated ``add_*Servicer_to_server`` functions register every method of their service.
:func:`add_service` registers them through the generic handler instead (a dictionary lookup
when a call comes) and keeps as registered methods only the ones named: the hot path
(ModelInfer). With every method of GRPCInferenceService, Health and the v1 service
registered, unary ModelInfer ran about a quarter slower (benchmarks/grpc_vs_triton.py).
Every generated handler parses its own request (:mod:`.parsing`), so bytes that are no valid
message get Triton's answer instead of grpc.aio's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import grpc

from repokit.frontends.grpc.parsing import parsing_handler


class _HandlerCapture:
    """Stands in for the server while generated code registers its method handlers."""

    def __init__(self) -> None:
        self.service = ""
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # the same handlers come again through add_registered_method_handlers

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.service, self.handlers = service, dict(handlers)


def add_service(
    server: Any,
    add_to_server: Callable[[Any, Any], None],
    servicer: Any,
    *,
    replace: dict[str, grpc.RpcMethodHandler] | None = None,
    registered: Iterable[str] = (),
) -> None:
    """Add ``servicer`` as ``add_to_server`` (generated) would, with the handlers in ``replace``
    instead of the generated ones and only the methods in ``registered`` registered."""
    capture = _HandlerCapture()
    add_to_server(servicer, capture)
    if not capture.service:
        raise RuntimeError(f"{add_to_server.__name__} registered no service")
    handlers = {name: parsing_handler(h) for name, h in capture.handlers.items()}
    handlers.update(replace or {})
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(capture.service, handlers),)
    )
    hot = {name: handlers[name] for name in registered}
    if hot:
        server.add_registered_method_handlers(capture.service, hot)
