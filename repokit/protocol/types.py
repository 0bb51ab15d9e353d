"""Protocol-neutral inference request and response types shared by every frontend and backend.

Frontends decode their wire format into these (HTTP JSON/binary, gRPC, legacy v1), the core
checks and schedules them, backends execute them. Tensor data is always a numpy array:
BYTES tensors are ``object`` arrays of ``bytes``; BF16 tensors are ``uint16`` arrays holding
the raw bfloat16 words. Arrays decoded from request bodies are read-only views
(``numpy.frombuffer``), never copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

ParamValue = bool | int | float | str


@dataclass(frozen=True)
class SharedMemoryRef:
    """A tensor placed in a registered shared-memory region."""

    region: str
    offset: int
    byte_size: int


@dataclass
class InferTensor:
    name: str
    datatype: str  # protocol name: "FP32", "BYTES", "BF16", ...
    shape: tuple[int, ...]
    data: npt.NDArray[Any]
    parameters: dict[str, ParamValue] = field(default_factory=dict)


@dataclass
class InputSpec:
    """An input as the client sent it, before its data is resolved (shared memory)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: npt.NDArray[Any] | None  # None when it comes from shared memory
    shm: SharedMemoryRef | None = None
    parameters: dict[str, ParamValue] = field(default_factory=dict)


@dataclass
class RequestedOutput:
    name: str
    classification: int = 0  # top-k classification when > 0
    shm: SharedMemoryRef | None = None
    parameters: dict[str, ParamValue] = field(default_factory=dict)  # frontend-specific extras


@dataclass
class InferRequest:
    model_name: str
    model_version: str = ""  # "" = the highest READY version
    id: str = ""
    inputs: list[InputSpec] = field(default_factory=list)
    outputs: list[RequestedOutput] = field(default_factory=list)  # empty = every output
    parameters: dict[str, ParamValue] = field(default_factory=dict)  # custom, passed to the model
    sequence_id: int | str = 0  # 0 / "" = not part of a sequence
    sequence_start: bool = False
    sequence_end: bool = False
    priority: int = 0
    timeout_us: int = 0
    raw_input: bool = False  # HTTP raw binary request: the single input's shape is deduced


@dataclass
class InferResponse:
    model_name: str
    model_version: str
    id: str = ""
    outputs: list[InferTensor] = field(default_factory=list)
    parameters: dict[str, ParamValue] = field(default_factory=dict)
    # outputs written to shared memory: name -> (ref, datatype, shape); they carry no data here
    shm_outputs: dict[str, tuple[SharedMemoryRef, str, tuple[int, ...]]] = field(
        default_factory=dict
    )
    # every output name (in memory or shm) in the model's order, as Triton lists them; only
    # filled when there are shm outputs (otherwise ``outputs`` already has that order)
    output_order: list[str] = field(default_factory=list)
    # streamed responses of decoupled models: True on the response that completes the request
    final: bool = False


def empty_array(datatype: str) -> npt.NDArray[Any]:
    if datatype == "BYTES":
        return np.empty(0, dtype=object)
    return np.empty(0, dtype=np.uint8)
