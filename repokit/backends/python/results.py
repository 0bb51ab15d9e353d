"""Result conversion on the server side: an instance process's packed results
(:data:`~repokit.backends.python.messages.PackedResult`) become the ``BackendResult`` the core
answers with. Execute replies, decoupled responses and answers sent through response senders
all come through :meth:`ResultUnpacker.unpack`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from repokit.backends.base import BackendResult
from repokit.backends.python import ipc
from repokit.backends.python.messages import ERROR, SENT_LATER, PackedResult
from repokit.errors import Code, RepokitError
from repokit.protocol import datatypes
from repokit.protocol.types import InferTensor, ParamValue


class ResultUnpacker:
    """Unpacks the results of one model's instances (caching parsed dtypes and the protocol
    datatype of each numpy dtype)."""

    def __init__(self) -> None:
        self._dtypes: dict[str, np.dtype[Any]] = {}
        self._datatypes: dict[np.dtype[Any], str] = {}

    def datatype(self, dtype: np.dtype[Any]) -> str:
        """The protocol datatype of an output's numpy dtype (BYTES for the others)."""
        name = self._datatypes.get(dtype)
        if name is None:
            found = datatypes.from_numpy(dtype)
            name = self._datatypes[dtype] = found.protocol if found is not None else "BYTES"
        return name

    def unpack(self, item: PackedResult | None) -> BackendResult:
        """The result of one request; an empty one when its response comes (or came) another
        way (None, :data:`~repokit.backends.python.messages.SENT_LATER`)."""
        if item is None or item == SENT_LATER:
            return BackendResult()
        if item[0] == ERROR:
            _, code_name, message = item
            code = Code.__members__.get(code_name, Code.INTERNAL)
            return BackendResult(error=RepokitError(code, message))
        _, outputs, parameters = item
        tensors = []
        for name, packed in outputs:
            array = ipc.unpack_array(packed, self._dtypes)
            tensors.append(InferTensor(name, self.datatype(array.dtype), array.shape, array))
        if not parameters:
            return BackendResult(outputs=tensors)
        params: dict[str, ParamValue] = {
            k: v for k, v in parameters.items() if isinstance(v, (bool, int, float, str))
        }
        return BackendResult(outputs=tensors, parameters=params)
