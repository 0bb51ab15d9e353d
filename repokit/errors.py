"""The error vocabulary of repokit's core.

``RepokitError(code, message)`` carries a protocol-neutral :class:`Code` (Triton's
``TRITONSERVER_Error_Code`` set). Frontends map codes to their own status in one table each:
HTTP in ``repokit.frontends.http``, gRPC in ``repokit.frontends.grpc``. The core never names
HTTP statuses or headers.

Exception tree::

    RepokitError                 any failure with a code and a user-facing message
    ├── ConfigError              a model configuration or repository problem (INVALID_ARG)
    └── BackendUnavailable       a backend's optional dependency is missing (UNAVAILABLE)
"""

from __future__ import annotations

import enum


class Code(enum.Enum):
    INTERNAL = "INTERNAL"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"


# Triton's names of the codes, as its ``Status::AsString()`` writes them before a message
# ("Internal: ..."): the reasons of failed model loads carry them
CODE_TEXT: dict[Code, str] = {
    Code.INTERNAL: "Internal",
    Code.NOT_FOUND: "Not found",
    Code.INVALID_ARG: "Invalid argument",
    Code.UNAVAILABLE: "Unavailable",
    Code.UNSUPPORTED: "Unsupported",
    Code.ALREADY_EXISTS: "Already exists",
    Code.CANCELLED: "Cancelled",
    Code.UNKNOWN: "Unknown",
}


class RepokitError(Exception):
    """An error with a protocol-neutral code and a message a user can act on."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"RepokitError({self.code.name}, {self.message!r})"


class ConfigError(RepokitError):
    def __init__(self, message: str) -> None:
        super().__init__(Code.INVALID_ARG, message)


class BackendUnavailable(RepokitError):
    def __init__(self, message: str) -> None:
        super().__init__(Code.UNAVAILABLE, message)


def invalid_arg(message: str) -> RepokitError:
    return RepokitError(Code.INVALID_ARG, message)


def not_found(message: str) -> RepokitError:
    return RepokitError(Code.NOT_FOUND, message)


def unavailable(message: str) -> RepokitError:
    return RepokitError(Code.UNAVAILABLE, message)


def internal(message: str) -> RepokitError:
    return RepokitError(Code.INTERNAL, message)


def unsupported(message: str) -> RepokitError:
    return RepokitError(Code.UNSUPPORTED, message)
