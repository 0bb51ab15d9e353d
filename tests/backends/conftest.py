"""Helpers for backend tests: a ModelContext for a model directory written into tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from google.protobuf import json_format

from repokit.backends.base import BackendRequest, ModelContext
from repokit.config.parse import parse_text
from repokit.protocol import datatypes
from repokit.protocol.types import InferTensor


def make_context(
    repo: Path, name: str, config_text: str, files: dict[str, bytes | str]
) -> ModelContext:
    """Write <repo>/<name>/config.pbtxt and version-1 files; return the context to load it."""
    model_dir = repo / name
    version_dir = model_dir / "1"
    version_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(config_text)
    for relative, content in files.items():
        target = version_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            target.write_text(content)
        else:
            target.write_bytes(content)
    config = parse_text(config_text)
    config_json = json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True))
    return ModelContext(
        name=name,
        version=1,
        model_dir=model_dir,
        version_dir=version_dir,
        repository=repo,
        config=config,
        config_json=config_json,
    )


def request(
    inputs: dict[str, np.ndarray], outputs: tuple[str, ...] = (), **kwargs: object
) -> BackendRequest:
    tensors = {}
    for name, array in inputs.items():
        found = datatypes.from_numpy(array.dtype)
        assert found is not None
        tensors[name] = InferTensor(name, found.protocol, tuple(array.shape), array)
    return BackendRequest(inputs=tensors, requested_outputs=outputs, **kwargs)  # type: ignore[arg-type]
