"""What Triton 2.51's onnxruntime backend refuses when it compares a config's tensors with
the model's at load time (``ValidateInputs``/``ValidateOutputs``, ``CompareDimsSupported``):
the serving backend (:mod:`repokit.backends.onnxruntime`) and ``repokit validate``'s deep
check (:mod:`repokit.config.onnx_io`) both ask here, so they refuse the same configs with
Triton's words."""

from __future__ import annotations

from repokit.protocol.generated import model_config_pb2 as mc


def shape_problem(
    config: mc.ModelConfig,
    side: str,
    tensor: mc.ModelInput | mc.ModelOutput,
    shape: tuple[int, ...],
) -> str:
    """Why Triton 2.51's onnxruntime backend refuses ``tensor``'s dims (its reshape, when it
    has one) for the model's ``shape`` at load time (``ValidateInputs``/``ValidateOutputs``,
    ``CompareDimsSupported``), or "". Inputs: a model dimension of -1 matches any config
    dimension; outputs must match exactly. A ragged input needs the model shape [-1]; a scalar
    (rank 0) takes only 1s; batch outputs are not compared."""
    model = config.name
    name = tensor.name
    dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
    if side == "output" and any(name in b.target_name for b in config.batch_output):
        return ""
    if side == "input" and getattr(tensor, "allow_ragged_batch", False):
        if shape != (-1,):
            return (
                f"unable to load model '{model}', configuration expects model provides input "
                f"with shape [-1]  for ragged input '{name}', model provides {_dims_text(shape)}"
            )
        return ""
    if not shape:
        if any(d != 1 for d in dims):
            return (
                f"unable to load model '{model}', scalar tensor '{name}', should only provide 1 "
                "in the model configuration when the model doesn't support batching. Model "
                f"configuration provided: {_dims_text(dims)}."
            )
        return ""
    exact = side == "output"
    prefix = f"model '{model}', tensor '{name}': "
    if config.max_batch_size > 0:
        if shape[0] != -1:
            return (
                f"{prefix}for the model to support batching the shape should have at least 1 "
                "dimension and the first dimension must be -1; but shape expected by the model "
                f"is {_dims_text(shape)}"
            )
        full = [-1, *dims]
        if not _dims_match(shape, full, exact):
            return (
                f"{prefix}the model expects {len(shape)} dimensions (shape {_dims_text(shape)}) "
                f"but the model configuration specifies {len(full)} dimensions (an initial batch "
                "dimension because max_batch_size > 0 followed by the explicit tensor shape, "
                f"making complete shape {_dims_text(full)})"
            )
        return ""
    if not _dims_match(shape, dims, exact):
        return (
            f"{prefix}the model expects {len(shape)} dimensions (shape {_dims_text(shape)}) but "
            f"the model configuration specifies {len(dims)} dimensions (shape {_dims_text(dims)})"
        )
    return ""


def _dims_match(shape: tuple[int, ...], dims: list[int], exact: bool) -> bool:
    if len(shape) != len(dims):
        return False
    return all(have == want for have, want in zip(shape, dims, strict=True) if exact or have != -1)


def _dims_text(dims: tuple[int, ...] | list[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"
