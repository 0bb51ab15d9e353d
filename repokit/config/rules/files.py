"""Files a model needs besides its config: the model file of every loaded version, label files
(§4.8), a custom batching strategy library, model repository agents."""

from __future__ import annotations

import os
from pathlib import Path

from repokit.config.rules.context import RuleContext
from repokit.config.rules.triton_words import join_path, unreadable_file
from repokit.repository.backends import expected_artifact
from repokit.repository.versions import version_folder_name


def _join(directory: Path, relative: str) -> Path:
    """Triton's JoinPath: a plain concatenation, even for an absolute second part."""
    return Path(os.path.normpath(f"{directory}/{relative}"))


def check_model_files(ctx: RuleContext) -> None:
    artifact = expected_artifact(ctx.config)
    if artifact is None:
        return
    for version in ctx.versions:
        folder = version_folder_name(version)
        path = ctx.model.path / folder / artifact.filename
        rel = ctx.relative(path)
        try:
            is_dir = path.is_dir()
            exists = is_dir or path.is_file()
        except OSError:
            exists = is_dir = False
        if not exists:
            where = (
                f"'{folder}/'"
                if folder == str(version)
                else (f"'{folder}/' (Triton looks up version {version} there)")
            )
            ctx.report(
                "model-file-missing",
                f"version {version} of model '{ctx.name}' has no model file "
                f"'{artifact.filename}' in {where}; backend '{ctx.config.backend}' "
                "expects it (set default_model_filename if the file has another name)",
                path="default_model_filename",
                file=rel,
            )
        elif artifact.kind == "file" and is_dir:
            ctx.report(
                "model-file-wrong-kind",
                f"'{rel}' is a directory but backend '{ctx.config.backend}' expects a file",
                path="default_model_filename",
                file=rel,
            )
        elif artifact.kind == "dir" and not is_dir:
            ctx.report(
                "model-file-wrong-kind",
                f"'{rel}' is a file but platform '{ctx.config.platform}' expects a directory",
                path="default_model_filename",
                file=rel,
            )


def check_label_files(ctx: RuleContext) -> None:
    model_dir = Path(os.path.normpath(ctx.model.path))
    for i, output in enumerate(ctx.config.output):
        if not output.label_filename:
            continue
        path = _join(model_dir, output.label_filename)
        field = f"output[{i}].label_filename"
        if model_dir not in path.parents:
            ctx.report(
                "label-file-outside-model-dir",
                f"label file path '{output.label_filename}' for output '{output.name}' "
                f"in model '{ctx.name}' is outside model directory; Triton 2.51 reads "
                "it, newer Triton refuses to load the model",
                path=field,
            )
        if not path.is_file():
            ctx.report(
                "label-file-missing",
                f"failed to open text file for read {ctx.relative(path)}: label_filename "
                f"of output '{output.name}' is resolved relative to the model directory",
                path=field,
                triton=unreadable_file(join_path(str(ctx.model.path), output.label_filename)),
            )


def check_batch_strategy(ctx: RuleContext) -> None:
    parameters = ctx.config.parameters
    if "TRITON_BATCH_STRATEGY_PATH" not in parameters:
        return
    field = "parameters[TRITON_BATCH_STRATEGY_PATH]"
    if ctx.config.HasField("sequence_batching"):
        ctx.report(
            "batch-strategy-with-sequence",
            "TRITON_BATCH_STRATEGY_PATH cannot be specified with sequence batcher, "
            "using default batching strategy",
            path=field,
        )
        return
    library = parameters["TRITON_BATCH_STRATEGY_PATH"].string_value
    if not os.path.exists(library):
        ctx.report(
            "batch-strategy-path-missing", f"Batching library path not found: {library}", path=field
        )


def check_repository_agents(ctx: RuleContext) -> None:
    config = ctx.config
    if config.HasField("model_repository_agents") and not config.model_repository_agents.agents:
        ctx.report(
            "repository-agent-unavailable",
            "model_repository_agents is present but lists no agent; Triton 2.51 crashes "
            "(segmentation fault) loading such a model. Remove the field",
            path="model_repository_agents",
        )
    for i, agent in enumerate(config.model_repository_agents.agents):
        ctx.report(
            "repository-agent-unavailable",
            f"model repository agent '{agent.name}' is used, but the reference Triton "
            'has no repository agents installed and fails with "failed to poll from '
            "model repository\"; remove it or install the agent under the server's "
            "repoagent directory",
            path=f"model_repository_agents.agents[{i}]",
        )
