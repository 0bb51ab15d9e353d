"""Label-file access for frontends that build classifications themselves (the legacy v1 API).

The v2 classification extension formats ``value:index:label`` strings inside the core
(:mod:`repokit.core.outputs`); the v1 API returns structured classes instead, computed by its
frontend from the raw output, and needs the labels of the output's ``label_filename``, which the
core read once at load (``LoadedVersion.labels``).
"""

from __future__ import annotations

from collections.abc import Sequence

from repokit.core.service import InferenceService


def output_labels(
    service: InferenceService, model: str, version: str, output: str
) -> Sequence[str]:
    """The label lines of ``output`` of the given model version (empty without a label file).

    Raises ``RepokitError`` (NOT_FOUND / UNAVAILABLE) like every model lookup when the version
    is not loaded."""
    return service.manager.get(model, version).labels.get(output, ())
