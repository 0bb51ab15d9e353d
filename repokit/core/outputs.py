"""Turn a backend result into the protocol response: requested outputs, the config's output
shape (reshape undone), classification, and outputs written to shared memory."""

from __future__ import annotations

from dataclasses import replace

from repokit.backends.base import BackendResult
from repokit.core.loaded_model import LoadedVersion
from repokit.core.request_checks import OutputInfo
from repokit.core.shared_memory import SystemSharedMemory
from repokit.protocol.classification import classify
from repokit.protocol.tensor_codec import array_to_bytes
from repokit.protocol.types import InferRequest, InferResponse, InferTensor, SharedMemoryRef


def _config_shape(tensor: InferTensor, info: OutputInfo | None, batching: bool) -> InferTensor:
    """Give an output with a ``reshape`` its configured ``dims`` back (plus the batch dim)."""
    if info is None or info.reshape is None:
        return tensor
    lead = tensor.shape[:1] if batching and tensor.shape else ()
    dims = list(info.dims)
    total = int(tensor.data.size)
    known = 1
    for dim in (*lead, *dims):
        known *= dim if dim != -1 else 1
    if dims.count(-1) == 1 and known:
        dims[dims.index(-1)] = total // known
    target = (*lead, *dims)
    count = 1
    for dim in target:
        count *= dim
    if -1 in target or count != total or target == tensor.shape:
        return tensor
    return replace(tensor, shape=target, data=tensor.data.reshape(target))


def _plain_outputs(request: InferRequest, result: BackendResult) -> list[InferTensor] | None:
    """The outputs as they are when nothing is asked of them (no classification, no shared
    memory) and the model reshapes none; None otherwise."""
    asked = request.outputs
    if not asked:
        return list(result.outputs)
    names = set()
    for output in asked:
        if output.classification > 0 or output.shm is not None:
            return None
        names.add(output.name)
    outputs = result.outputs
    return [t for t in outputs if t.name in names]


def finish_outputs(
    loaded: LoadedVersion,
    request: InferRequest,
    result: BackendResult,
    shared_memory: SystemSharedMemory,
) -> InferResponse:
    if not loaded.io.reshaped_outputs and not result.parameters:
        plain = _plain_outputs(request, result)
        if plain is not None:
            # positional: this runs for every response
            return InferResponse(loaded.name, loaded.version_text, request.id, plain)
    wanted = {o.name: o for o in request.outputs}
    batching = loaded.config.max_batch_size > 0
    outputs: list[InferTensor] = []
    in_shm: dict[str, tuple[SharedMemoryRef, str, tuple[int, ...]]] = {}
    for tensor in result.outputs:
        requested = wanted.get(tensor.name)
        if wanted and requested is None:
            continue
        tensor = _config_shape(tensor, loaded.io.outputs.get(tensor.name), batching)
        if requested is not None and requested.classification > 0:
            classes = classify(
                tensor.datatype,
                tensor.data,
                requested.classification,
                batching=batching,
                labels=loaded.labels.get(tensor.name, ()),
            )
            tensor = InferTensor(tensor.name, "BYTES", tuple(classes.shape), classes)
        if requested is not None and requested.shm is not None:
            shared_memory.write(
                requested.shm, tensor.name, array_to_bytes(tensor.datatype, tensor.data)
            )
            in_shm[tensor.name] = (requested.shm, tensor.datatype, tuple(tensor.shape))
            continue
        outputs.append(tensor)
    order = [t.name for t in result.outputs if not wanted or t.name in wanted] if in_shm else []
    return InferResponse(
        model_name=loaded.name,
        model_version=str(loaded.version),
        id=request.id,
        outputs=outputs,
        parameters=dict(result.parameters),
        shm_outputs=in_shm,
        output_order=order,
    )
