"""What an instance process needs to take a request straight from its wire bytes.

The server builds one :class:`WirePlan` per model version from its request checks
(:class:`repokit.core.request_checks.ModelIO`) and sends it with the first wire request to each
instance; :mod:`repokit.backends.python.wire_grpc` then decodes, checks and answers requests
without the server's help. Plain data (standard library and numpy only), as the instance
process imports nothing else before the model asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from repokit.protocol.plain_request import InputPlan


@dataclass(frozen=True)
class WirePlan:
    model_name: str
    version_text: str  # the version every response names
    max_batch_size: int
    inputs: InputPlan  # the plain-request rules' inputs (repokit.protocol.plain_request)
    outputs: frozenset[str]  # the config's outputs: what may be requested, and what a
    # request that names none gets
