"""``repokit deploy kserve``: read the repository, build the manifests, check them against the
schemas in ``schemas/kubernetes/``, write them with the container build file."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from repokit.config.report import ValidateOptions
from repokit.config.validate import validate_repository
from repokit.deploy.kserve import (
    KServeOptions,
    RepositoryFacts,
    check_options,
    dockerfile,
    load_schema,
    manifests,
    schema_errors,
)
from repokit.errors import Code, RepokitError
from repokit.paths import schemas_dir

WHEELS_NOTE = (
    "Put a repokit wheel here to install it instead of the package index's:\n"
    "  pip wheel --no-deps -w wheels/ PATH_TO_REPOKIT_CHECKOUT\n"
)


class InvalidRepository(RepokitError):
    """The repository has models Triton would refuse to load."""


def repository_facts(root: Path) -> RepositoryFacts:
    """Models, the ones needing a GPU, the ones with sequence batching, and the error count
    of ``repokit validate`` (a repository with errors is refused)."""
    report = validate_repository(root, ValidateOptions(deep=False))
    gpu: list[str] = []
    sequences: list[str] = []
    for name, model in sorted(report.models.items()):
        config = model.config
        if config is None:
            continue
        tensorrt = config.platform == "tensorrt_plan" or config.backend == "tensorrt"
        gpu_groups = any(g.kind == g.KIND_GPU for g in config.instance_group)
        if tensorrt or gpu_groups:
            gpu.append(name)
        if config.HasField("sequence_batching"):
            sequences.append(name)
    return RepositoryFacts(
        models=tuple(sorted(report.models)),
        gpu_models=tuple(gpu),
        sequence_models=tuple(sequences),
        error_count=report.error_count,
    )


@dataclass
class Bundle:
    options: KServeOptions
    facts: RepositoryFacts
    documents: list[dict[str, Any]]
    dockerfile: str
    written: list[Path] = field(default_factory=list)


def build_bundle(root: Path, options: KServeOptions, gpu: bool | None) -> Bundle:
    """The manifests for ``root``; ``gpu`` None: a GPU image when a model needs one."""
    facts = repository_facts(root)
    if facts.error_count:
        raise InvalidRepository(
            Code.INVALID_ARG,
            f"repository '{root}' has {facts.error_count} error(s) Triton would refuse to load; "
            f"see `repokit validate {root}`",
        )
    if not facts.models:
        raise RepokitError(Code.INVALID_ARG, f"repository '{root}' has no models")
    options = replace(
        options,
        gpu=bool(facts.gpu_models) if gpu is None else gpu,
        sequence_models=facts.sequence_models,
    )
    check_options(options)
    documents = manifests(options)
    schema = load_schema(schemas_dir())
    problems = [p for document in documents for p in schema_errors(document, schema)]
    if problems:  # a bug in the generator, not the user's input
        raise RepokitError(
            Code.INTERNAL, "generated manifests break the schema: " + "; ".join(problems)
        )
    return Bundle(options, facts, documents, dockerfile(options))


def write_bundle(bundle: Bundle, out_dir: Path) -> list[Path]:
    """``kserve.yaml`` (every manifest, ``---`` apart), ``Dockerfile`` and ``wheels/``."""
    import yaml

    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = out_dir / "kserve.yaml"
    manifest.write_text(
        yaml.safe_dump_all(bundle.documents, sort_keys=False, default_flow_style=False)
    )
    docker = out_dir / "Dockerfile"
    docker.write_text(bundle.dockerfile)
    wheels = out_dir / "wheels"
    wheels.mkdir(exist_ok=True)
    (wheels / "README.txt").write_text(WHEELS_NOTE)
    bundle.written = [manifest, docker, wheels]
    return bundle.written
