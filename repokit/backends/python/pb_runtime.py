"""The instance process's connection to the server, as ``triton_python_backend_utils`` sees it.

``pb_utils`` is a process-wide API in Triton (``pb_utils.Logger.log_info(...)``,
``pb_utils.load_model(...)``, ``InferenceRequest(...).exec()`` take no server handle), so the
stub configures the one :data:`RUNTIME` of its process before it imports the model; this is the
only module-level state of the instance process and it never exists in the server. Without a
link (``pb_utils`` imported outside an instance process, e.g. in unit tests) log lines go to
stderr and server calls raise ``TritonModelException``.
"""

from __future__ import annotations

import contextvars
import sys
from typing import Any

from repokit.backends.python.child_link import ChildLink
from repokit.backends.python.messages import LOG, OK

_LEVEL_NAMES = ("INFO", "WARNING", "ERROR", "VERBOSE")


class StubRuntime:
    def __init__(self) -> None:
        self.link: ChildLink | None = None
        self.instance_name = ""
        self.model_name = ""
        self.decoupled = False
        self.executing = False  # BLS is allowed once initialize has finished
        self.finalizing = False
        # set by InferenceRequest.set_release_flags(RESCHEDULE): the stub then looks for the
        # rescheduled requests of the execute call that returned (the plain path checks one bool)
        self.reschedule_requested = False
        # keys of the requests whose execute() is running in this context: the BLS requests it
        # makes are made on their behalf (cancelled when all of them are cancelled)
        self.parents: contextvars.ContextVar[tuple[int, ...]] = contextvars.ContextVar(
            "parents", default=()
        )

    def require_link(self, what: str) -> ChildLink:
        link = self.link
        if link is None:
            from repokit.backends.python.pb_utils import TritonModelException

            raise TritonModelException(f"{what} is only available inside a model instance")
        return link

    def call(self, what: str, op: str, payload: Any) -> Any:
        """A server call; a refusal raises TritonModelException with the server's message."""
        from repokit.backends.python.pb_utils import TritonModelException

        status, body = self.require_link(what).call(op, payload)
        if status != OK:
            raise TritonModelException(str(body))
        return body

    def log(self, level: int, message: str, filename: str, line: int) -> None:
        link = self.link
        if link is None or link.closed:
            name = _LEVEL_NAMES[level] if 0 <= level < len(_LEVEL_NAMES) else "INFO"
            sys.stderr.write(f"{name} {filename}:{line}] {message}\n")
            return
        link.send((LOG, level, message, filename, line))


RUNTIME = StubRuntime()
