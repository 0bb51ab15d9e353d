"""``repokit validate --deep``: check configs against the model files themselves.

Runs after the load-time rules: for every ONNX Runtime model that validated, each version's
model file is read with ``onnx`` and compared with the (autocompleted) config, exactly as
``repokit build`` does before compiling (``repokit.config.onnx_io.check_onnx_config``).
"""

from __future__ import annotations

from repokit.config.report import RepositoryReport


def deep_check(report: RepositoryReport) -> None:
    """Append model-file findings to the ModelReports of ``report`` (in place)."""
    from repokit.config.onnx_io import check_onnx_config  # imports onnx: only when asked

    for name, model in sorted(report.models.items()):
        config = model.config
        if config is None or not model.ok or config.backend != "onnxruntime":
            continue
        filename = config.default_model_filename or "model.onnx"
        for version in model.versions:
            path = model.directory / str(version) / filename
            relative = path.relative_to(report.root) if path.is_relative_to(report.root) else path
            model.diagnostics.extend(
                check_onnx_config(config, path, model=name, file=str(relative))
            )
