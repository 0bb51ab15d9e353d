"""CUDA shared-memory registration, answered as Triton 2.51's release build (built with GPU
support) answers on a machine without GPUs, which is what repokit always is.

Triton's HTTP frontend reads a register request's JSON first (``raw_handle.b64``,
``byte_size``, ``device_id``; a base64 handle that does not decode to the 64 bytes of a
``cudaIpcMemHandle_t`` is refused), then opens the CUDA IPC handle, which fails without a GPU:
it logs why and tells the client only "failed to register shared memory region: invalid
args" (INVALID_ARG). Its gRPC frontend checks nothing before the open, so every gRPC register
request gets that answer. Status and unregister have no region to find: status of a named
region is NOT_FOUND, unregister (one or all) succeeds.

JSON type errors are TritonJson's texts (HTTP 500 in Triton; 400 in repokit, as every
malformed request document).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from repokit.errors import RepokitError, invalid_arg

log = logging.getLogger(__name__)

IPC_HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)
_NOT_BASE64 = re.compile(rb"[^A-Za-z0-9+/]")
REFUSED = "failed to register shared memory region: invalid args"


def _unsigned(document: dict[str, Any], member: str) -> None:
    if member not in document:
        raise invalid_arg(f"attempt to access non-existing object member '{member}'")
    value = document[member]
    if type(value) is not int or value < 0:
        raise invalid_arg("attempt to access JSON non-unsigned-integer as unsigned-integer")


def check_cuda_register(document: Any) -> None:
    """The checks of Triton's HTTP register request, in its order (INVALID_ARG)."""
    if not isinstance(document, dict) or "raw_handle" not in document:
        raise invalid_arg("Shared memory register request has no 'raw_handle' field")
    handle = document["raw_handle"]
    if not isinstance(handle, dict) or "b64" not in handle:
        raise invalid_arg("attempt to access non-existing object member 'b64'")
    encoded = handle["b64"]
    if not isinstance(encoded, str):
        raise invalid_arg("attempt to access JSON non-string as string")
    _unsigned(document, "byte_size")
    _unsigned(document, "device_id")
    # Triton's base64 decoder skips characters outside the alphabet (padding too) and keeps
    # every whole byte of the rest
    digits = len(_NOT_BASE64.sub(b"", encoded.encode()))
    if digits * 6 // 8 != IPC_HANDLE_BYTES:
        raise invalid_arg("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")


def cuda_register_refused(region: str) -> RepokitError:
    """The answer to a register request that got as far as opening the handle."""
    log.error(
        "failed to open CUDA IPC handle for shared memory region '%s': this server runs "
        "without GPUs",
        region,
    )
    return invalid_arg(REFUSED)
