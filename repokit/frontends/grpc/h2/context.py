"""What a servicer sees of its call (the part of ``grpc.aio.ServicerContext`` repokit's
servicers and the generated handlers use): abort, set_code / set_details, invocation metadata,
trailing metadata, time remaining, peer, cancelled / done and their callbacks, read / write for
handlers that stream through the context."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, NoReturn

import grpc

from repokit.frontends.grpc.h2.headers import Metadata

OK = grpc.StatusCode.OK


class CallContext:
    """State of a call a servicer may read and set; :class:`.call.Call` does the rest."""

    __slots__ = (
        "_callbacks",
        "_code",
        "_deadline",
        "_details",
        "_loop",
        "_trailing",
        "finished",
        "was_cancelled",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, deadline: float | None) -> None:
        self._loop = loop
        self._deadline = deadline
        self._code = OK
        self._details = ""
        self._trailing: Metadata = ()
        self._callbacks: list[Callable[[Any], None]] | None = None
        self.finished = False
        self.was_cancelled = False

    # --- set by the servicer -------------------------------------------------------------
    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Metadata = ()
    ) -> NoReturn:
        if code == OK:
            raise grpc.aio.UsageError("Abort with grpc.StatusCode.OK is not allowed")
        self._code, self._details = code, details
        if trailing_metadata:
            self._trailing = tuple(trailing_metadata)
        raise grpc.aio.AbortError()

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def set_trailing_metadata(self, trailing_metadata: Metadata) -> None:
        self._trailing = tuple(trailing_metadata)

    def trailing_metadata(self) -> Metadata:
        return self._trailing

    def set_compression(self, compression: Any) -> None:
        pass  # responses follow --grpc-infer-response-compression-level

    def disable_next_message_compression(self) -> None:
        pass

    # --- read by the servicer ------------------------------------------------------------
    def invocation_metadata(self) -> Metadata:
        raise NotImplementedError

    def peer(self) -> str:
        raise NotImplementedError

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(self._deadline - self._loop.time(), 0.0)

    def cancelled(self) -> bool:
        return self.was_cancelled

    def done(self) -> bool:
        return self.finished

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        if self.finished:
            self._loop.call_soon(callback, self)
            return
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(callback)

    def _run_callbacks(self) -> None:
        callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            self._loop.call_soon(callback, self)

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def peer_identities(self) -> None:
        return None

    def peer_identity_key(self) -> None:
        return None
