"""gRPC test helpers: a real repokit server (gRPC, and HTTP on demand; port 0) on its own loop
in a thread (``tests.frontends.http.server_thread``); sample repositories with a ``types`` model."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from repokit.frontends.runner import ServerHandle
from tests.frontends.http.server_thread import copy_models
from tests.frontends.http.server_thread import running_server as running_server_thread

#: sample models Triton's CPU build can serve too (python backend only)
PYTHON_MODELS = ("add_sub", "identity", "accumulate", "batcher")

_TYPES_CONFIG = """
name: "types"
backend: "python"
max_batch_size: 0
input [
  { name: "B" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "Z" data_type: TYPE_BOOL dims: [ -1 ] },
  { name: "H" data_type: TYPE_FP16 dims: [ -1 ] },
  { name: "I" data_type: TYPE_INT8 dims: [ -1 ] }
]
output [
  { name: "B_OUT" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "Z_OUT" data_type: TYPE_BOOL dims: [ -1 ] },
  { name: "H_OUT" data_type: TYPE_FP16 dims: [ -1 ] },
  { name: "I_OUT" data_type: TYPE_INT8 dims: [ -1 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

_TYPES_MODEL = '''
"""Returns each input unchanged as <name>_OUT (BYTES, BOOL, FP16, INT8)."""
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for name in ("B", "Z", "H", "I"):
                data = pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                outputs.append(pb_utils.Tensor(name + "_OUT", data))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
'''


def make_repository(root: Path, with_types_model: bool = True) -> Path:
    """A copy of the python sample models (and a ``types`` echo model) under ``root``."""
    repo = copy_models(root / "models", PYTHON_MODELS)
    if with_types_model:
        (repo / "types" / "1").mkdir(parents=True)
        (repo / "types" / "config.pbtxt").write_text(textwrap.dedent(_TYPES_CONFIG))
        (repo / "types" / "1" / "model.py").write_text(_TYPES_MODEL)
    return repo


@contextmanager
def running_server(repo: Path, http: bool = False, **core: Any) -> Iterator[ServerHandle]:
    """Serve ``repo`` on 127.0.0.1 with every port chosen by the OS: gRPC, and HTTP too when
    ``http`` (both on the one loop, over one InferenceService)."""
    # most gRPC tests need only the gRPC port
    with running_server_thread(
        repo, allow_grpc=True, allow_http=http, allow_metrics=False, **core
    ) as server:
        assert server.handle is not None
        yield server.handle
