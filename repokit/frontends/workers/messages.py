"""Every message between the scheduling process and a frontend worker.

Both sides import this module; a message is one of these classes, pickled (protocol 5, large
buffers out of band) in the python backend's frames (:mod:`repokit.backends.python.ipc`).

Worker to scheduling process: :class:`Call` (an operation of the InferenceService, named by
``method``), :class:`Cancel` (the client went away), :class:`Credit` (room for more items of a
stream), :class:`TraceEnd` (a traced request's last timestamps), :class:`Ack` (a
:class:`Snapshot` was applied), :class:`WorkerReady` or :class:`WorkerFailed`,
:class:`ClientsGone` (stopping: its HTTP clients' connections are closed).

Scheduling process to worker: :class:`WorkerStart` (the settings, the ports to bind, the first
snapshot), :class:`Reply` / :class:`Failure` (the end of a call), :class:`StreamItem` /
:class:`StreamEnd` (a stream's answers; its failure is a :class:`Failure`), :class:`Snapshot`.

Errors cross as (code, message): ``Failure.code`` is a :class:`repokit.errors.Code` value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from repokit.errors import Code, RepokitError

# how many stream items the scheduling process sends before it waits for a Credit
STREAM_WINDOW = 16


@dataclass(frozen=True, slots=True)
class VersionFacts:
    """What a worker's frontends ask of a model version on every request."""

    decoupled: bool
    wire_lane: bool  # the version's instances decode requests themselves


@dataclass(frozen=True, slots=True)
class ServiceState:
    """The state snapshot: the facts of every version a request may name, keyed by
    (model, version as requested; "" = the default version), and whether tracing is on."""

    seq: int = 0
    versions: dict[tuple[str, str], VersionFacts] = field(default_factory=dict)
    tracing: bool = False


@dataclass(frozen=True, slots=True)
class Call:
    """Run ``method`` of the service with ``args``; answered by Reply or Failure (a stream
    method: by StreamItems, then StreamEnd or Failure)."""

    id: int
    method: str
    args: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Reply:
    id: int
    value: Any = None


@dataclass(frozen=True, slots=True)
class Failure:
    id: int
    code: str
    message: str

    @classmethod
    def of(cls, id: int, error: RepokitError) -> Failure:
        return cls(id, error.code.value, error.message)

    def error(self) -> RepokitError:
        return RepokitError(Code(self.code), self.message)


@dataclass(frozen=True, slots=True)
class StreamItem:
    id: int
    value: Any


@dataclass(frozen=True, slots=True)
class StreamEnd:
    id: int


@dataclass(frozen=True, slots=True)
class Cancel:
    """The call's client went away: cancel it (its model sees ``is_cancelled()``)."""

    id: int


@dataclass(frozen=True, slots=True)
class Credit:
    """The worker consumed ``count`` items of stream ``id``: that many more may come."""

    id: int
    count: int = 1


@dataclass(frozen=True, slots=True)
class TraceEnd:
    """A traced call's answer was sent: the worker's timestamps since the call (``(name,
    monotonic ns)``; the clock is the machine's), and the end of the trace."""

    id: int
    stamps: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Snapshot:
    state: ServiceState


@dataclass(frozen=True, slots=True)
class Ack:
    seq: int


@dataclass(frozen=True, slots=True)
class WorkerStart:
    """The first message to a worker: what to serve (a ``ServeSettings``, whose ports are the
    ones the scheduling process reserved) and the state to start from."""

    settings: Any
    state: ServiceState


@dataclass(frozen=True, slots=True)
class WorkerReady:
    pid: int


@dataclass(frozen=True, slots=True)
class WorkerFailed:
    """The worker could not start serving (say, a port or certificate it could not use): the
    reason, for the scheduling process to raise as its own."""

    message: str


@dataclass(frozen=True, slots=True)
class ClientsGone:
    """A stopping worker no longer serves HTTP connections its clients held open (they closed,
    or the exit timeout ran out): it drains now, and the scheduling process may stop the
    service (as one process stops it once its own HTTP connections are gone)."""
