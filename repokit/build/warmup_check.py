"""Run the warmup samples a build wrote through the model before the build is kept.

``repokit serve`` (and Triton) run every ``model_warmup`` sample at load and refuse the model
when one fails, so a build that writes samples the model cannot run writes a repository that does
not load. This check loads each version of the staged model the way the server does (the
backend the config names: ONNX Runtime in this process, a python model in its own instance
process, TensorRT when it is installed), with one instance, and executes every sample with the
server's own warmup code (``repokit.scheduler.warmup``). The first failing sample's message is
returned, as the server would print it. A model that calls other models (BLS) or model
control during warmup needs the server around it: its samples cannot be judged here
(:class:`WarmupUnchecked`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path

from repokit.backends.base import ModelContext
from repokit.backends.registry import create_backend
from repokit.backends.server_api import NO_SERVER_MESSAGE
from repokit.config.normalize import normalized_copy
from repokit.core.config_json import config_to_json
from repokit.errors import RepokitError
from repokit.protocol.generated import model_config_pb2 as mc
from repokit.scheduler.warmup import build_warmup_samples, run_warmup


class WarmupUnchecked(Exception):
    """The samples could not be judged without a server (the model called other models)."""


# (compiled config, model directory, versions) -> None, or why a sample does not run
WarmupRunner = Callable[[mc.ModelConfig, Path, Iterable[int]], "str | None"]


def _one_instance(config: mc.ModelConfig) -> mc.ModelConfig:
    """The config as the server normalises it, with a single CPU instance (every instance runs
    the same samples; one shows whether they run)."""
    checked = normalized_copy(config)
    del checked.instance_group[:]
    group = checked.instance_group.add()
    group.kind = mc.ModelInstanceGroup.KIND_CPU
    group.count = 1
    group.name = f"{config.name}_0"
    return checked


async def _run_version(config: mc.ModelConfig, model_dir: Path, version: int) -> str | None:
    context = ModelContext(
        name=config.name,
        version=version,
        model_dir=model_dir,
        version_dir=model_dir / str(version),
        repository=model_dir.parent,
        config=config,
        config_json=json.dumps(config_to_json(config)),
    )
    try:
        samples = build_warmup_samples(config, model_dir)
        backend = create_backend(context)
        await backend.load()
    except RepokitError as exc:
        return f"version {version} does not load: {exc.message}"
    try:
        await run_warmup(backend, 0, samples)
    except RepokitError as exc:
        if NO_SERVER_MESSAGE in exc.message:
            raise WarmupUnchecked(
                "the model calls other models (BLS) or model control while it runs, which "
                "needs a server"
            ) from None
        return f"version {version}: {exc.message}"
    finally:
        with contextlib.suppress(RepokitError):  # the check is over either way
            await backend.unload()
    return None


async def _run_all(config: mc.ModelConfig, model_dir: Path, versions: Iterable[int]) -> str | None:
    checked = _one_instance(config)
    for version in sorted(versions):
        failure = await _run_version(checked, model_dir, version)
        if failure is not None:
            return failure
    return None


def check_warmup(config: mc.ModelConfig, model_dir: Path, versions: Iterable[int]) -> str | None:
    """Run ``config.model_warmup`` on every version in ``model_dir``; None when all samples run,
    else why the first one does not."""
    if not config.model_warmup:
        return None
    return asyncio.run(_run_all(config, model_dir, versions))
